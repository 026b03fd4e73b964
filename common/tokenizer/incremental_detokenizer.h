// Streaming detokenization: fed token ids a few at a time, returns the newly
// completed text. A multibyte UTF-8 character split across tokens is held back
// until its last byte arrives, so every returned chunk is valid UTF-8, and the
// concatenation of all chunks (plus Finish) equals Tokenizer::Decode of all ids.
//
// One instance per stream, used from one thread at a time; the Tokenizer must
// outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace floe {

class Tokenizer;

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens);

  // Returns the text completed by `ids` (possibly empty). OUT_OF_RANGE for an id
  // outside the vocabulary; the state is then unchanged.
  absl::StatusOr<std::string> Add(absl::Span<const int32_t> ids);

  // End of stream: returns the held-back bytes of an unfinished character, as U+FFFD.
  std::string Finish();

  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
  int32_t strip_spaces_;  // Leading spaces still to drop (SentencePiece "▁" prefix).
};

}  // namespace floe
