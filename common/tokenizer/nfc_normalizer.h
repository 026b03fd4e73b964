// Unicode NFC normalization (the `NFC` normalizer of tokenizer.json, used by
// Qwen2/Qwen3), backed by ICU. Immutable; thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe {

class NfcNormalizer {
 public:
  // INTERNAL if ICU's normalization data cannot be loaded.
  static absl::StatusOr<std::unique_ptr<NfcNormalizer>> Create();

  // Returns `text` itself when it is already in NFC (the common case, with no
  // copy); otherwise writes the normalized form to `*storage` and returns it.
  // `text` must be valid UTF-8.
  absl::string_view Normalize(absl::string_view text, std::string* storage) const;

 private:
  explicit NfcNormalizer(const void* icu_normalizer) : icu_normalizer_(icu_normalizer) {}
  const void* icu_normalizer_;  // const icu::Normalizer2*, owned by ICU.
};

}  // namespace floe
