// How the ranks of one worker share the model.
//
// ParallelLayout: one rank of a tensor-parallel group of `size` ranks
// (Megatron): q heads, KV heads and the MLP's intermediate rows split by
// rank. q|k|v and gate|up are column-parallel (a rank computes its heads'
// and its rows' outputs), o_proj and down_proj row-parallel (partial sums,
// all-reduced). Where KV heads are fewer than ranks, each KV head is
// replicated on the ranks whose q heads read it. Norms and the embedding
// are replicated; the lm_head is vocab-parallel over every
// rank of the worker (RankLayout::vocab_begin/end).
//
// RankLayout: one rank of a Shift Parallelism grid of T x S ranks (world
// W = T S), which runs each step either as TP over all W ranks or as
// Ulysses SP over S ranks with TP over T inside it. Rank w is (t, s) =
// (w / S, w % S): its SP group is the S consecutive ranks t S .. t S + S - 1,
// its TP group the T ranks s, S + s, ... (Arctic's transposed grid). So
//  - in both modes rank w attends, and caches KV for, the heads of
//    TensorParallelLayout(config, w, W): a shift moves no KV;
//  - it holds the weights of its SP group's heads and MLP rows (TP shard t
//    of T), which contain its W-way TP shard: the TP mode reads that as a
//    slice of the same memory, so the weights are held once.
//
//   W = 4, T = 2, S = 2, a model of 8 heads:
//     rank        0     1     2     3
//     (t, s)    (0,0) (0,1) (1,0) (1,1)
//     heads     0-1   2-3   4-5   6-7     KV and attention, both modes
//     weights   0-3   0-3   4-7   4-7     heads (and MLP rows) held
//     SP group  {0,1}       {2,3}         all-to-alls (token rows <-> heads)
//     TP group  {0,2} {1,3}               all-reduces in SP x TP mode
#pragma once

#include <cstdint>
#include <vector>

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

struct RankLayout {
  int rank = 0, tensor = 1, sequence = 1;  // w; T; S
  ParallelLayout heads;                    // TensorParallelLayout(config, w, W)
  // The W-way layouts of the S ranks of this rank's SP group, in order:
  // their heads and MLP rows are the weights this rank holds.
  std::vector<ParallelLayout> group;
  // The lm_head rows (vocabulary entries) this rank computes logits for, in
  // both modes; rank 0 gathers them.
  int64_t vocab_begin = 0, vocab_end = 0;

  int world() const { return tensor * sequence; }
  int tp_rank() const { return rank / sequence; }  // t
  int sp_rank() const { return rank % sequence; }  // s
};

// The layout of rank w of a T x S grid. Beyond TensorParallelLayout's
// checks (for W ranks), with S > 1 the TP mode's slices must fall on the
// CPU kernels' 16-row panels: head_dim and intermediate_size / W multiples
// of 16 (INVALID_ARGUMENT naming the numbers otherwise).
absl::StatusOr<RankLayout> ShiftRankLayout(const ModelConfig& config, int rank, int tensor, int sequence);

}  // namespace floe
