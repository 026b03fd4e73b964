// TokenVocab: the byte strings of a tokenizer's tokens, as the grammar
// matcher and the token-mask precompute walk them.
//
// Per token id it holds the raw bytes the token stands for and whether the
// grammar may ever allow it: special tokens (control meaning: EOS, chat
// markers, reserved ids) and tokens with no bytes never are; the caller
// decides EOS through GrammarMatcher::CanEnd(). The allowed tokens are also
// laid out as a byte trie in preorder (children sorted by byte), so a walk
// that finds a prefix impossible skips every token below it in one jump, and
// the tokens below any trie node are one contiguous run of sorted_ids().
//
// Immutable after construction; share one per tokenizer across grammars and
// threads (const methods only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace floe {
class Tokenizer;
}

namespace floe::grammar {

class TokenVocab {
 public:
  // A token longer than this is refused: the trie stores depths in 16 bits
  // and real vocabularies stay far below (Llama 3's longest is 256 bytes).
  static constexpr size_t kMaxTokenBytes = 4096;

  struct TrieNode {
    uint32_t subtree_end;  // index of the first node after this node's subtree
    uint32_t token_begin;  // first index in sorted_ids() of this subtree's tokens
    uint32_t own_end;      // [token_begin, own_end): tokens whose bytes end here
    uint16_t depth;        // bytes from the root; 1 for the root's children
    uint8_t byte;          // the byte on the edge into this node
  };

  // Every id of `tokenizer` (vocab_size() of them); special tokens excluded.
  static absl::StatusOr<std::shared_ptr<const TokenVocab>> FromTokenizer(const Tokenizer& tokenizer);
  // Token id i has bytes tokens[i]; excluded[i] (when given, same length)
  // marks ids the grammar never allows. InvalidArgument for a length
  // mismatch or a token past kMaxTokenBytes.
  static absl::StatusOr<std::shared_ptr<const TokenVocab>> FromTokens(std::vector<std::string> tokens,
                                                                     std::vector<bool> excluded = {});

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  // Words of a token bitmask: bit (id % 32) of word id / 32.
  size_t mask_words() const { return (bytes_.size() + 31) / 32; }
  // Empty for ids outside [0, size()).
  std::string_view bytes(int32_t id) const;
  // False for excluded ids, ids without bytes and ids out of range.
  bool allowed(int32_t id) const { return id >= 0 && id < size() && allowed_[id]; }

  // Allowed ids sorted by their bytes (ties by id).
  const std::vector<int32_t>& sorted_ids() const { return sorted_ids_; }
  // Trie nodes in preorder, the root left out: node i's children follow it.
  const std::vector<TrieNode>& trie() const { return trie_; }
  // Longest allowed token, in bytes.
  size_t max_token_bytes() const { return max_token_bytes_; }
  size_t MemoryBytes() const;

 private:
  TokenVocab() = default;
  void BuildTrie();

  std::vector<std::string> bytes_;
  std::vector<bool> allowed_;
  std::vector<int32_t> sorted_ids_;
  std::vector<TrieNode> trie_;
  size_t max_token_bytes_ = 0;
};

}  // namespace floe::grammar
