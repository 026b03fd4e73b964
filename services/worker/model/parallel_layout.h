// How one rank of a tensor-parallel group of `size` ranks shards the model
// (Megatron): q heads, KV heads and the MLP's intermediate rows split by
// rank. q|k|v and gate|up are column-parallel (a rank computes its heads'
// and its rows' outputs), o_proj and down_proj row-parallel (partial sums,
// all-reduced). Where KV heads are fewer than ranks, each KV head is
// replicated on the ranks whose q heads read it. Norms, the embedding and
// the lm_head are replicated (vocab-parallel lm_head: not yet).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "services/worker/model/model_config.h"

namespace floe {

struct ParallelLayout {
  int rank = 0, size = 1;
  int q_head_begin = 0, q_head_end = 0;    // [begin, end) of the global q heads
  int kv_head_begin = 0, kv_head_end = 0;  // the KV heads those q heads read
  int64_t inter_begin = 0, inter_end = 0;  // rows of gate/up, columns of down

  int num_heads() const { return q_head_end - q_head_begin; }
  int num_kv_heads() const { return kv_head_end - kv_head_begin; }
  int64_t intermediate() const { return inter_end - inter_begin; }
};

// The layout of `rank` in a group of `size`; INVALID_ARGUMENT naming the
// numbers when the model cannot be split so (heads or intermediate not
// divisible by size; KV heads neither divisible by size nor dividing it).
absl::StatusOr<ParallelLayout> TensorParallelLayout(const ModelConfig& config, int rank, int size);

}  // namespace floe
