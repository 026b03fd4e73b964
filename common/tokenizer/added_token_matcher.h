// Finds `added_tokens` in raw text before pre-tokenization, as Hugging Face
// does: leftmost-longest, non-overlapping matches, with the lstrip / rstrip /
// single_word flags. Immutable after construction; FindAll is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace floe {

class AddedTokenMatcher {
 public:
  struct Token {
    std::string content;
    int32_t id = 0;
    bool lstrip = false;       // Whitespace before the token belongs to it.
    bool rstrip = false;       // Whitespace after the token belongs to it.
    bool single_word = false;  // Only matches when not inside a word.
  };
  struct Match {
    size_t begin;  // Byte range in the text, including stripped whitespace.
    size_t end;
    int32_t id;
  };

  explicit AddedTokenMatcher(const std::vector<Token>& tokens);

  // Replaces `*out` with the matches in `text`, in order.
  void FindAll(absl::string_view text, std::vector<Match>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // Sorted by byte.
    int32_t token = -1;                                 // Index into tokens_.
  };
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<Token> tokens_;
  std::vector<Node> nodes_;
  std::array<int32_t, 256> root_{};  // First byte -> node, -1 for none.
};

}  // namespace floe
