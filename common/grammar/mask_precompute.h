// MaskPrecompute: classifies the vocabulary's tokens from a partly known
// stack, for the adaptive token-mask cache (token_mask.h).
//
// A KnownStack is a stack top position and the frames known below it; below
// them is either the root (nothing unknown) or kUnknownNode. Each token is
//   accepted  - some path consumes all its bytes without needing the
//               unknown frames (a path that pops into them exactly at the
//               token's last byte counts: every real stack can complete),
//   uncertain - no such path, but some path pops into the unknown frames
//               with bytes left whose next byte may follow there,
//   rejected  - otherwise.
// Accepted and rejected tokens hold for every real stack with that known
// part; uncertain ones must be checked against the real stack.
//
// The walk shares work twice over: tokens are walked through the vocabulary
// trie (a dead prefix skips its whole subtree), and stack sets are states of
// a lazily built DFA (state x byte -> state), so a byte seen again in the
// same state is a table lookup; the DFA persists across calls.
//
// Not thread-safe: CompiledGrammar calls it under its lock.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/grammar/program.h"
#include "common/grammar/stack_engine.h"
#include "common/grammar/vocab.h"

namespace floe::grammar {

struct KnownStack {
  std::vector<uint32_t> positions;  // the top (a kBytes position), then each known frame
  bool rooted = false;              // the root lies right below the last frame
};

struct TokenClasses {
  std::vector<int32_t> accepted;   // ascending by bytes
  std::vector<int32_t> uncertain;  // ascending by bytes
};

// Walks `ids` (ascending by bytes), sharing the steps of common prefixes.
// step(d, byte) computes the state at depth d + 1 from the one at depth d
// and returns false when it is dead (no byte can follow it). visit(id,
// depth) is called once per id with the depth its walk stopped at: the
// token's length, or less where the state died.
template <typename Step, typename Visit>
void WalkSortedTokens(const TokenVocab& vocab, absl::Span<const int32_t> ids, Step&& step, Visit&& visit) {
  std::string_view prev;
  size_t valid = 0;  // states at depths 0..valid are those of prev's walk
  for (int32_t id : ids) {
    const std::string_view b = vocab.bytes(id);
    size_t d = 0;
    while (d < valid && d < b.size() && b[d] == prev[d]) ++d;
    // prev's state at depth d is reusable; if it was dead, the first step
    // from it says so at once.
    while (d < b.size()) {
      const bool alive = step(d, static_cast<uint8_t>(b[d]));
      ++d;
      if (!alive) break;
    }
    valid = d;
    prev = b;
    visit(id, d);
  }
}

class MaskPrecompute {
 public:
  MaskPrecompute(const Program* program, const TokenVocab* vocab);

  // Every allowed token of the vocabulary.
  TokenClasses ClassifyAll(const KnownStack& stack);
  // Only `candidates` (ascending by bytes).
  TokenClasses ClassifySome(const KnownStack& stack, absl::Span<const int32_t> candidates);
  size_t MemoryBytes() const;
  size_t dfa_states() const { return states_.size(); }

 private:
  static constexpr uint32_t kDead = 0;
  static constexpr uint32_t kNoEdge = UINT32_MAX;
  // Bounds the DFA cache (transition rows are 1 KiB each); past it the DFA
  // and arena are dropped before the next classification.
  static constexpr size_t kMaxStates = 8192;

  // Per state, packed apart from the tops so the walk's loads stay small.
  static constexpr uint8_t kEnds = 1;     // a token ending in this state is accepted
  static constexpr uint8_t kUnknown = 2;  // the step into this state popped into the unknown frames
  uint32_t Begin(const KnownStack& stack, ByteSet* follow);
  uint32_t Intern(const Frontier& f);
  uint32_t Next(uint32_t state, uint8_t byte) {
    const uint32_t to = edges_[size_t{state} * 256 + byte];
    return to != kNoEdge ? to : Compute(state, byte);
  }
  uint32_t Compute(uint32_t state, uint8_t byte);

  const Program* program_;
  const TokenVocab* vocab_;
  NodeArena arena_;
  StackStepper stepper_;
  Frontier scratch_;
  std::vector<std::vector<uint32_t>> states_;  // the tops of each state
  std::vector<uint8_t> flags_;
  std::vector<uint32_t> edges_;
  absl::flat_hash_map<std::vector<uint32_t>, uint32_t> index_;
  // Per depth of the walk: the DFA state and whether an uncertain path exists.
  std::vector<uint32_t> depth_state_;
  std::vector<uint8_t> depth_uncertain_;
};

}  // namespace floe::grammar
