#include "common/grammar/mask_precompute.h"

#include <utility>

namespace floe::grammar {

MaskPrecompute::MaskPrecompute(const Program* program, const TokenVocab* vocab)
    : program_(program), vocab_(vocab), stepper_(program) {
  depth_state_.resize(vocab->max_token_bytes() + 1);
  depth_uncertain_.resize(vocab->max_token_bytes() + 1);
}

uint32_t MaskPrecompute::Begin(const KnownStack& stack, ByteSet* follow) {
  if (states_.empty() || states_.size() > kMaxStates) {
    arena_.Clear();
    states_.clear();
    flags_.clear();
    edges_.clear();
    index_.clear();
    scratch_.Clear();
    Intern(scratch_);  // kDead
  }
  uint32_t node = stack.rooted ? kRootNode : kUnknownNode;
  for (size_t i = stack.positions.size() - 1; i > 0; --i) node = arena_.Intern(stack.positions[i], node);
  scratch_.Clear();
  scratch_.tops.push_back(arena_.Intern(stack.positions[0], node));
  *follow = stack.rooted ? ByteSet() : program_->follow(program_->rule_of(stack.positions.back()));
  return Intern(scratch_);
}

uint32_t MaskPrecompute::Intern(const Frontier& f) {
  std::vector<uint32_t> key = f.tops;
  key.push_back((f.reached_root ? 1u : 0u) | (f.reached_unknown ? 2u : 0u));
  const auto [it, inserted] = index_.try_emplace(std::move(key), static_cast<uint32_t>(states_.size()));
  if (inserted) {
    states_.push_back(f.tops);
    flags_.push_back((f.Dead() ? 0 : kEnds) | (f.reached_unknown ? kUnknown : 0));
    edges_.resize(edges_.size() + 256, kNoEdge);
  }
  return it->second;
}

uint32_t MaskPrecompute::Compute(uint32_t state, uint8_t byte) {
  stepper_.Step(arena_, states_[state], byte, &scratch_);
  const uint32_t to = Intern(scratch_);
  edges_[size_t{state} * 256 + byte] = to;
  return to;
}

TokenClasses MaskPrecompute::ClassifyAll(const KnownStack& stack) {
  TokenClasses out;
  ByteSet follow;
  depth_state_[0] = Begin(stack, &follow);
  depth_uncertain_[0] = 0;
  const std::vector<TokenVocab::TrieNode>& trie = vocab_->trie();
  const std::vector<int32_t>& ids = vocab_->sorted_ids();
  const auto subtree_tokens_end = [&](uint32_t end) {
    return end < trie.size() ? trie[end].token_begin : static_cast<uint32_t>(ids.size());
  };
  for (uint32_t i = 0; i < trie.size();) {
    const TokenVocab::TrieNode& node = trie[i];
    const uint32_t from = depth_state_[node.depth - 1];
    const bool uncertain =
        depth_uncertain_[node.depth - 1] || ((flags_[from] & kUnknown) && follow.Has(node.byte));
    const uint32_t to = Next(from, node.byte);
    if (to == kDead) {
      // Nothing below can be accepted here; it is all uncertain or all rejected.
      if (uncertain)
        out.uncertain.insert(out.uncertain.end(), ids.begin() + node.token_begin,
                             ids.begin() + subtree_tokens_end(node.subtree_end));
      i = node.subtree_end;
      continue;
    }
    if (flags_[to] & kEnds) {
      for (uint32_t k = node.token_begin; k < node.own_end; ++k) out.accepted.push_back(ids[k]);
    } else if (uncertain) {
      for (uint32_t k = node.token_begin; k < node.own_end; ++k) out.uncertain.push_back(ids[k]);
    }
    depth_state_[node.depth] = to;
    depth_uncertain_[node.depth] = uncertain;
    ++i;
  }
  return out;
}

TokenClasses MaskPrecompute::ClassifySome(const KnownStack& stack, absl::Span<const int32_t> candidates) {
  TokenClasses out;
  ByteSet follow;
  depth_state_[0] = Begin(stack, &follow);
  depth_uncertain_[0] = 0;
  WalkSortedTokens(
      *vocab_, candidates,
      [&](size_t d, uint8_t byte) {
        const uint32_t from = depth_state_[d];
        depth_uncertain_[d + 1] = depth_uncertain_[d] || ((flags_[from] & kUnknown) && follow.Has(byte));
        depth_state_[d + 1] = Next(from, byte);
        return depth_state_[d + 1] != kDead;
      },
      [&](int32_t id, size_t d) {
        if (d == vocab_->bytes(id).size() && (flags_[depth_state_[d]] & kEnds)) {
          out.accepted.push_back(id);
        } else if (depth_uncertain_[d]) {
          out.uncertain.push_back(id);
        }
      });
  return out;
}

size_t MaskPrecompute::MemoryBytes() const {
  size_t n = arena_.MemoryBytes() + edges_.capacity() * sizeof(uint32_t) + flags_.capacity() +
             states_.capacity() * sizeof(std::vector<uint32_t>) +
             index_.capacity() * (sizeof(std::vector<uint32_t>) + sizeof(uint32_t) + 1);
  for (const auto& tops : states_) n += 2 * tops.capacity() * sizeof(uint32_t);  // the state and its key
  return n;
}

}  // namespace floe::grammar
