#include "common/grammar/vocab.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"

namespace floe::grammar {

absl::StatusOr<std::shared_ptr<const TokenVocab>> TokenVocab::FromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> tokens(static_cast<size_t>(tokenizer.vocab_size()));
  std::vector<bool> excluded(tokens.size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const absl::string_view b = tokenizer.TokenBytes(id);
    tokens[id].assign(b.data(), b.size());
    excluded[id] = tokenizer.IsSpecial(id);
  }
  return FromTokens(std::move(tokens), std::move(excluded));
}

absl::StatusOr<std::shared_ptr<const TokenVocab>> TokenVocab::FromTokens(std::vector<std::string> tokens,
                                                                          std::vector<bool> excluded) {
  if (!excluded.empty() && excluded.size() != tokens.size())
    return absl::InvalidArgumentError(absl::StrCat("token vocabulary: excluded has ", excluded.size(),
                                                   " entries for ", tokens.size(), " tokens"));
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    return absl::InvalidArgumentError(absl::StrCat("token vocabulary: ", tokens.size(), " tokens; the limit is ", INT32_MAX));
  std::shared_ptr<TokenVocab> vocab(new TokenVocab());
  vocab->allowed_.resize(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].size() > kMaxTokenBytes)
      return absl::InvalidArgumentError(absl::StrCat("token vocabulary: token ", id, " has ", tokens[id].size(),
                                                     " bytes; the limit is ", kMaxTokenBytes));
    const bool allowed = !tokens[id].empty() && (excluded.empty() || !excluded[id]);
    vocab->allowed_[id] = allowed;
    if (allowed) {
      vocab->sorted_ids_.push_back(static_cast<int32_t>(id));
      vocab->max_token_bytes_ = std::max(vocab->max_token_bytes_, tokens[id].size());
    }
  }
  vocab->bytes_ = std::move(tokens);
  std::sort(vocab->sorted_ids_.begin(), vocab->sorted_ids_.end(), [&](int32_t a, int32_t b) {
    const int c = vocab->bytes_[a].compare(vocab->bytes_[b]);
    return c != 0 ? c < 0 : a < b;
  });
  vocab->BuildTrie();
  return std::shared_ptr<const TokenVocab>(std::move(vocab));
}

std::string_view TokenVocab::bytes(int32_t id) const {
  if (id < 0 || id >= size()) return {};
  return bytes_[id];
}

void TokenVocab::BuildTrie() {
  // Sorted order is preorder: a token comes before every token it prefixes,
  // so nodes are appended as each token's unshared suffix and closed (their
  // subtree_end fixed) once a later token diverges above them.
  std::vector<uint32_t> open;  // open[d] = node at depth d + 1 on the current path
  std::string_view prev;
  const auto close_to = [&](size_t depth) {
    while (open.size() > depth) {
      trie_[open.back()].subtree_end = static_cast<uint32_t>(trie_.size());
      open.pop_back();
    }
  };
  for (size_t k = 0; k < sorted_ids_.size(); ++k) {
    const std::string_view b = bytes_[sorted_ids_[k]];
    size_t lcp = 0;
    while (lcp < b.size() && lcp < prev.size() && b[lcp] == prev[lcp]) ++lcp;
    close_to(lcp);
    for (size_t d = lcp; d < b.size(); ++d) {
      open.push_back(static_cast<uint32_t>(trie_.size()));
      trie_.push_back(TrieNode{0, static_cast<uint32_t>(k), static_cast<uint32_t>(k), static_cast<uint16_t>(d + 1),
                               static_cast<uint8_t>(b[d])});
    }
    // The token ends at the deepest open node; duplicates of a byte string
    // land on the same node, one after another in sorted order.
    trie_[open.back()].own_end = static_cast<uint32_t>(k + 1);
    prev = b;
  }
  close_to(0);
}

size_t TokenVocab::MemoryBytes() const {
  size_t n = sizeof(*this) + trie_.capacity() * sizeof(TrieNode) + sorted_ids_.capacity() * sizeof(int32_t) +
             allowed_.capacity() / 8;
  for (const std::string& b : bytes_) n += sizeof(std::string) + (b.size() > 15 ? b.capacity() : 0);
  return n;
}

}  // namespace floe::grammar
