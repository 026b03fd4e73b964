// CompiledGrammar: a grammar's Program together with a token vocabulary and
// the adaptive token-mask cache the matchers of every request share.
//
// For each position that can be a stack top, the vocabulary is classified
// once (MaskPrecompute) against what is known statically below that
// position: the frames of rules entered from only one place. Accepted
// tokens are stored as an id list, a list of the ids not accepted, or a
// bitset, whichever is smallest (equal contents stored once); uncertain
// tokens (they pop past the known frames) as a sorted id list. The union
// of several positions' masks (a state with many stack tops) is cached as
// one bitset, within max_union_bytes. At run time a stack's uncertain tokens are
// classified again against its real frames (up to refine_depth more of
// them), cached per frame sequence here, so repeated contexts cost a lookup;
// what still depends on deeper frames is checked by the matcher itself.
//
// Positions are classified lazily on first use (or all at Create with
// precompute_all). Thread safety: immutable apart from those caches, which
// are filled under an internal lock and published once; every method may be
// called from any number of threads, and the returned references stay valid
// for the object's lifetime.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/grammar/grammar.h"
#include "common/grammar/program.h"
#include "common/grammar/vocab.h"

namespace floe::grammar {

class MaskPrecompute;

struct CompileOptions {
  // Real frames (below the statically known ones) that key a refinement of
  // a stack's uncertain tokens. Deeper pops are checked per request.
  int refine_depth = 8;
  // Bound on cached refinements; past it, requests check uncertain tokens
  // against their own stacks (correct, slower).
  size_t max_refinements = 1 << 16;
  // Classify every stack-top position at Create instead of on first use.
  bool precompute_all = false;
  // Bound on the cached unions of several positions' masks (one bitset of
  // the vocabulary each); past it, unions are recomputed per mask.
  size_t max_union_bytes = size_t{32} << 20;
};

// The tokens from a stack top, before its real frames are looked at.
struct PositionMask {
  enum class Kind : uint8_t { kAcceptList, kRejectList, kBitset };
  Kind kind = Kind::kAcceptList;
  // kAcceptList: accepted ids; kRejectList: every id in [0, vocab size) not
  // accepted; kBitset: the accepted ids as mask words. Shared between
  // positions with equal contents (the steps of a bounded repetition).
  const std::vector<uint32_t>* data = nullptr;
  std::vector<int32_t> uncertain;  // ascending by bytes
  uint32_t accepted_count = 0;
  uint32_t static_frames = 0;  // frames below the top the classification knew
};

// A stack's uncertain tokens classified against more of its frames.
struct Refinement {
  std::vector<int32_t> accepted;       // when few; else
  std::vector<uint32_t> accepted_bits;  // mask words
  std::vector<int32_t> uncertain;  // still depend on deeper frames; ascending by bytes
};

struct CompiledGrammarStats {
  size_t positions = 0;      // stack-top positions of the program
  size_t classified = 0;     // positions classified so far
  size_t refinements = 0;    // refinements cached so far
  size_t unions = 0;         // unions of several positions' masks cached so far
  double precompute_ms = 0;  // time spent classifying, all calls together
  size_t memory_bytes = 0;   // program + caches (the shared vocabulary left out)
};

class CompiledGrammar {
 public:
  // `vocab` may be null: a byte-only grammar (no AcceptToken, no masks).
  // Errors: see Program::Build; InvalidArgument for a refine_depth outside
  // [0, 64].
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Create(const Grammar& grammar,
                                                                      std::shared_ptr<const TokenVocab> vocab,
                                                                      CompileOptions options = {});
  ~CompiledGrammar();

  const Program& program() const { return program_; }
  const TokenVocab* vocab() const { return vocab_.get(); }
  const CompileOptions& options() const { return options_; }

  // For the matcher. `pos` is a kBytes position; needs a vocabulary.
  const PositionMask& Classified(uint32_t pos) const;
  // `frames`: the top position, then the frames below it as far as known
  // (static_frames of them, then up to refine_depth more); `rooted` when
  // the root lies right below the last. Null when the cache is full.
  const Refinement* Refine(absl::Span<const uint32_t> frames, bool rooted) const;
  // The union of the accepted tokens of `positions` (sorted, distinct,
  // classified) as mask words; null when the cache is full.
  const std::vector<uint32_t>* Union(absl::Span<const uint32_t> positions) const;

  CompiledGrammarStats stats() const;

 private:
  CompiledGrammar(Program program, std::shared_ptr<const TokenVocab> vocab, CompileOptions options);
  const PositionMask& ClassifyLocked(uint32_t pos) const;
  PositionMask MakePositionMask(uint32_t pos) const;

  const Program program_;
  const std::shared_ptr<const TokenVocab> vocab_;
  const CompileOptions options_;
  // Dense over positions; non-null once classified, never changed after.
  std::unique_ptr<std::atomic<const PositionMask*>[]> masks_;

  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<PositionMask>> owned_masks_;
  mutable absl::node_hash_set<std::vector<uint32_t>> mask_data_;  // PositionMask::data, deduplicated
  mutable absl::flat_hash_map<std::vector<uint32_t>, std::unique_ptr<Refinement>> refinements_;
  mutable absl::flat_hash_map<std::vector<uint32_t>, std::unique_ptr<std::vector<uint32_t>>> unions_;
  mutable size_t union_bytes_ = 0;
  mutable std::unique_ptr<MaskPrecompute> precompute_;
  mutable double precompute_ms_ = 0;
};

// bitmask |= the tokens of `mask` (bitmask has vocab.mask_words() words;
// `scratch` is a caller-owned buffer for kRejectList).
void AddPositionMask(const PositionMask& mask, const TokenVocab& vocab, uint32_t* bitmask,
                     std::vector<uint32_t>* scratch);
// bitmask := the tokens of `mask`.
void WritePositionMask(const PositionMask& mask, const TokenVocab& vocab, uint32_t* bitmask);

inline void SetTokenBit(uint32_t* bitmask, int32_t id) { bitmask[id >> 5] |= uint32_t{1} << (id & 31); }
inline bool TokenBit(const uint32_t* bitmask, int32_t id) { return (bitmask[id >> 5] >> (id & 31)) & 1; }

}  // namespace floe::grammar
