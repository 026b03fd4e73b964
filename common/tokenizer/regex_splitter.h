// The `Split` pre-tokenizer with a `Regex` pattern and "Isolated" behaviour:
// every match is a piece, and so is every gap between matches. PCRE2 in UTF +
// UCP mode (JIT-compiled when available), which follows the Oniguruma syntax
// Hugging Face files use for \p{L}, \p{N}, (?!\S) and (?i:...).
// Immutable after Create; Split is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe {

class RegexSplitter {
 public:
  // INVALID_ARGUMENT (with PCRE2's message and offset) if `pattern` does not compile.
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(absl::string_view pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls `emit` on each non-empty piece of `text` (valid UTF-8), in order; the
  // pieces concatenate to `text`. INTERNAL if the matcher fails (resource limits).
  absl::Status Split(absl::string_view text,
                     absl::FunctionRef<void(absl::string_view)> emit) const;

 private:
  struct Impl;
  explicit RegexSplitter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace floe
