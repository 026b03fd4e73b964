// What one forward step runs: the engine's batch, in the terms the model and
// every backend share (no device, no scheduler).
#pragma once

#include <cstdint>
#include <span>

namespace floe {

// One sequence's slice of a forward step.
struct ForwardSequence {
  // Tokens to run this step: a prefill chunk, one decode token, or a decode
  // token followed by draft tokens under verification.
  std::span<const int32_t> tokens;
  // Position of tokens[0]; KV for positions [0, start_pos) is already cached.
  int32_t start_pos = 0;
  // Physical KV block of each logical block covering [0, start_pos + tokens.size()).
  std::span<const int32_t> block_table;
  // Logits are produced for the last `num_logits` tokens (0 for a prefill
  // chunk that does not end the prompt; 1 for a decode; 1+k when verifying k drafts).
  int32_t num_logits = 1;
  // Tree verification (empty: the tokens are a causal chain). parents[i] < i
  // is the index of token i's parent among `tokens`, -1 for tokens[0] (the
  // only root: the last committed token). Token i still writes its KV to slot
  // start_pos + i, but attends only to positions [0, start_pos) and its
  // ancestors (and itself), and its position id (RoPE) is start_pos + its
  // depth; so its logits and KV equal those of a chain along its root path.
  std::span<const int32_t> parents;
};

// How a worker over several ranks runs a step (model/parallel_layout.h):
// TP over all ranks, or Ulysses SP with TP inside it. Shift Parallelism
// picks one per step; one rank ignores it.
enum class ParallelMode : int32_t { kTensor = 0, kSequence = 1 };

inline const char* ParallelModeName(ParallelMode mode) { return mode == ParallelMode::kTensor ? "tp" : "sp"; }

// One token's KV (every layer, K and V) copied between cache slots.
struct KvSlotCopy {
  int32_t src_block = 0, src_slot = 0;
  int32_t dst_block = 0, dst_slot = 0;
};

}  // namespace floe
