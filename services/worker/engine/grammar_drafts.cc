#include "services/worker/engine/grammar_drafts.h"

#include <algorithm>
#include <string>

namespace floe {
namespace {

using grammar::GrammarMatcher;

// Undoes the last `steps` accepts. Drafts are at most 64 tokens and the
// matcher keeps 128 steps, so Rollback always can; were it ever refused,
// replaying the output from the start restores the same state.
void Restore(Sequence& seq, int steps) {
  if (steps == 0 || seq.matcher->Rollback(steps).ok()) return;
  seq.matcher->Reset();
  for (int32_t i = seq.prompt_len; i < seq.total_len(); ++i) seq.matcher->AcceptToken(seq.tokens[i]);
}

// Marks in `keep` the descendants of `node` (-1: the root) whose whole root
// path the grammar allows, depth first: one accept per node, each rolled
// back once its subtree is done. Depth <= 64 (the draft's size).
void KeepAllowed(Sequence& seq, const std::vector<std::vector<int32_t>>& children, int32_t node,
                 std::vector<bool>& keep) {
  for (int32_t c : children[node + 1]) {
    if (!seq.matcher->AcceptToken(seq.draft[c])) continue;
    keep[c] = true;
    KeepAllowed(seq, children, c, keep);
    Restore(seq, 1);
  }
}

// Drops the tree nodes whose root path the grammar forbids. Any
// topological order (parents[i] < i) is kept, re-indexed.
void PruneTree(Sequence& seq) {
  std::vector<int32_t>& draft = seq.draft;
  std::vector<int32_t>& parents = seq.draft_parents;
  const int32_t n = static_cast<int32_t>(draft.size());
  std::vector<std::vector<int32_t>> children(n + 1);
  for (int32_t i = 0; i < n; ++i) children[parents[i] + 1].push_back(i);
  std::vector<bool> keep(n, false);
  KeepAllowed(seq, children, -1, keep);
  std::vector<int32_t> index(n, -1);
  int32_t out = 0;
  bool chain = true;
  for (int32_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    index[i] = out;
    draft[out] = draft[i];
    parents[out] = parents[i] < 0 ? -1 : index[parents[i]];
    chain = chain && parents[out] == out - 1;
    ++out;
  }
  draft.resize(out);
  parents.resize(out);
  if (chain) parents.clear();  // verified as a chain, and extended like one
}

}  // namespace

std::vector<int32_t> GreedyTokens(const grammar::TokenVocab& vocab, std::string_view bytes, size_t max_tokens) {
  const std::vector<grammar::TokenVocab::TrieNode>& trie = vocab.trie();
  const std::vector<int32_t>& ids = vocab.sorted_ids();
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos < bytes.size() && out.size() < max_tokens) {
    // Down the trie along bytes[pos..]: the children of a node are the
    // nodes after it, each next sibling at the previous one's subtree_end.
    uint32_t child = 0, end = static_cast<uint32_t>(trie.size());
    int32_t best = -1;
    size_t best_len = 0;
    for (size_t d = 0; pos + d < bytes.size(); ++d) {
      const uint8_t b = static_cast<uint8_t>(bytes[pos + d]);
      uint32_t j = child;
      while (j < end && trie[j].byte < b) j = trie[j].subtree_end;
      if (j >= end || trie[j].byte != b) break;
      if (trie[j].own_end > trie[j].token_begin) {
        best = ids[trie[j].token_begin];
        best_len = d + 1;
      }
      child = j + 1;
      end = trie[j].subtree_end;
    }
    if (best < 0) break;
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

GrammarDraftResult ConstrainDraft(Sequence& seq, int32_t max_draft) {
  GrammarDraftResult result;
  GrammarMatcher& matcher = *seq.matcher;
  const size_t offered = seq.draft.size();
  if (!seq.draft_parents.empty()) PruneTree(seq);
  if (!seq.draft_parents.empty()) {  // a tree survived: verified as it is
    result.cut = static_cast<int32_t>(offered - seq.draft.size());
    seq.draft_proposed = static_cast<int32_t>(seq.draft.size());
    return result;
  }
  // A chain: accepted up to its first forbidden token, then extended from
  // there by what the grammar forces.
  int accepted = 0;
  while (accepted < static_cast<int>(seq.draft.size()) && matcher.AcceptToken(seq.draft[accepted])) ++accepted;
  seq.draft.resize(accepted);
  result.cut = static_cast<int32_t>(offered - seq.draft.size());
  seq.draft_proposed = accepted;
  if (accepted < max_draft) {
    const std::string forced = matcher.ForcedBytes(kMaxForcedDraftBytes);
    if (!forced.empty()) {
      const grammar::TokenVocab& vocab = *matcher.grammar().vocab();
      for (int32_t t : GreedyTokens(vocab, forced, static_cast<size_t>(max_draft - accepted))) {
        if (!matcher.AcceptToken(t)) break;  // cannot happen: forced bytes are all allowed
        seq.draft.push_back(t);
        ++accepted;
        ++result.forced;
      }
    }
  }
  Restore(seq, accepted);
  return result;
}

}  // namespace floe
