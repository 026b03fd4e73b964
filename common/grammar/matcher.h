// GrammarMatcher: the per-request state of constrained decoding - which
// bytes and tokens the grammar allows next, given what was accepted so far.
//
// A byte-level pushdown matcher: the state is the set of stacks (persistent,
// hash-consed; see stack_engine.h) the input so far can have produced, each
// with a byte set on top, plus whether the grammar can end here. Accepting
// advances every stack; a rejected input leaves the state unchanged.
// FillNextTokenMask combines the shared precomputed classification of each
// stack top (token_mask.h) with a check of the tokens that depend on the
// stack below it; results of that check are cached per stack.
//
// Rollback: each successful AcceptByte / AcceptBytes / AcceptToken is one
// step; the last max_rollback steps can be undone exactly (speculation
// rejecting draft tokens). Memory stays bounded: the stack arena is
// compacted to what the current state and the history still use.
//
// Thread safety: one matcher per request, used by one thread at a time; the
// CompiledGrammar it holds is shared and thread-safe. Copyable (a copy is an
// independent matcher in the same state).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/grammar/stack_engine.h"
#include "common/grammar/token_mask.h"

namespace floe::grammar {

struct MatcherStats {
  uint64_t masks = 0;                 // FillNextTokenMask calls
  uint64_t stack_checked_tokens = 0;  // tokens checked against this matcher's own stacks
};

struct MatcherOptions {
  // Steps Rollback can undo.
  int max_rollback = 128;
  // Arena nodes past which unused stacks are dropped (the bound doubles
  // while most nodes are still in use).
  size_t compact_after_nodes = size_t{1} << 16;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, MatcherOptions options = {});

  // All or nothing: false (state unchanged) unless every byte is allowed in
  // turn. An empty input is accepted.
  bool AcceptBytes(std::string_view bytes);
  bool AcceptByte(uint8_t byte) { return AcceptBytes(std::string_view(reinterpret_cast<const char*>(&byte), 1)); }
  // False for ids the vocabulary never allows (special tokens, out of range)
  // and for a grammar compiled without a vocabulary.
  bool AcceptToken(int32_t id);

  // Restores the state before the last `steps` accepts. InvalidArgument
  // (state unchanged) when fewer than `steps` are kept.
  absl::Status Rollback(int steps);
  // Steps Rollback can undo now.
  int rollback_available() const { return history_count_; }

  // The input so far is a complete sentence: EOS may be sampled.
  bool CanEnd() const { return state_.reached_root; }
  // The input so far can be neither completed nor ended (a grammar with no
  // sentences never gets here: it fails to compile).
  bool IsDead() const { return state_.Dead(); }
  // The input is complete and no byte may follow: only EOS remains.
  bool IsCompleted() const { return state_.tops.empty() && state_.reached_root; }
  // Up to `max` bytes the grammar forces next: taken while exactly one byte
  // is possible and the grammar cannot end. Does not change the state.
  std::string ForcedBytes(size_t max) const;

  // bitmask[i / 32] bit (i % 32) := token i is allowed next, for every id of
  // the vocabulary (vocab()->mask_words() words; bits past the vocabulary
  // are zero). EOS is never set: allow it where CanEnd(). Writes nothing for
  // a grammar compiled without a vocabulary.
  void FillNextTokenMask(uint32_t* bitmask);

  // Back to the empty input; history dropped.
  void Reset();

  const CompiledGrammar& grammar() const { return *grammar_; }
  // Stacks in the current state and nodes in the arena (for tests, metrics).
  size_t stack_count() const { return state_.tops.size(); }
  size_t arena_nodes() const { return arena_.size(); }
  const MatcherStats& stats() const { return stats_; }

 private:
  // What a stack's uncertain tokens resolved to: a shared refinement (may
  // be null) and the ids this matcher checked against its own frames.
  struct StackTokens {
    const Refinement* shared = nullptr;
    std::vector<int32_t> own;
  };
  const StackTokens& ResolveUncertain(uint32_t top, const PositionMask& mask);
  std::vector<int32_t> CheckAgainstStack(uint32_t top, const std::vector<int32_t>& candidates);
  void PushHistory();
  void MaybeCompact();

  std::shared_ptr<const CompiledGrammar> grammar_;
  MatcherOptions options_;
  // Interning new stacks does not change what the matcher accepts, so the
  // const queries may grow the arena.
  mutable NodeArena arena_;
  mutable StackStepper stepper_;
  Frontier state_;
  mutable Frontier scratch_a_, scratch_b_;
  std::vector<Frontier> history_;  // ring buffer of max_rollback states
  int history_head_ = 0;           // slot of the oldest kept state
  int history_count_ = 0;
  size_t compact_threshold_;
  absl::flat_hash_map<uint32_t, StackTokens> stack_tokens_;
  absl::flat_hash_map<std::vector<uint32_t>, const std::vector<uint32_t>*> unions_;
  std::vector<uint32_t> positions_, frames_, scratch_bits_;
  std::vector<Frontier> walk_;
  MatcherStats stats_;
};

}  // namespace floe::grammar
