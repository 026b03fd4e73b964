// The operations the model's forward (llama_forward.h) is written in. A
// device implements them over its own memory: the model names activations
// by role and weights by the id their Prepare call returned, and never sees
// a pointer, so the same model code runs on the CPU (CpuBackend over
// kernels/cpu), on a GPU, or on one rank of several.
//
// Every op runs over all of the step's rows (the tokens of BeginStep, in
// order) unless it says otherwise, and reads or writes whole rows of the
// activations it names. Over several ranks (parallel_layout.h) the widths
// are the rank's: its q and KV heads, its share of the MLP; and each step
// runs in one ParallelMode, which decides the rows a rank holds and the
// ranks each collective spans.
//
// Threading: one caller (the backend's Forward); an implementation may use
// its own threads inside an op.
#pragma once

#include <cstdint>
#include <span>

#include "common/tensor/tensor_view.h"
#include "services/worker/model/forward_batch.h"

namespace floe {

// The step's activation buffers, each `rows` rows of its width:
//   kX, kXn: hidden_size (the residual stream and a normed or projected copy)
//   kQkv:    the q | k | v of the heads the step's qkv matrix computes,
//            as groups [q | k | v], one per rank whose heads they are
//   kAttn:   those heads' attention output, in head order
//   kGateUp: [gate | up] groups of the MLP rows the gate_up matrix computes
//   kFinal:  hidden_size, one row per logits row only
// In the SP mode a rank holds only its share of the step's rows in those,
// and the attention's view, every row but only its heads, in two more (the
// same buffers as kQkv and kAttn otherwise):
//   kQkvHeads:  every row's q | k | v of this rank's heads
//   kAttnHeads: every row's attention output of this rank's heads
enum class Activation { kX, kXn, kQkv, kAttn, kGateUp, kFinal, kQkvHeads, kAttnHeads };

// A weight prepared on the device; kNoWeight where the model has none.
using WeightId = int32_t;
inline constexpr WeightId kNoWeight = -1;

// What the model tells the device about a step, once, before its ops.
struct StepRows {
  std::span<const ForwardSequence> batch;  // block tables, tree masks
  std::span<const int32_t> tokens;         // every row's token id
  std::span<const int32_t> positions;      // every row's position id (RoPE)
  std::span<const int64_t> logit_rows;     // rows whose logits are wanted, in order
  int64_t max_context = 0;                 // the longest sequence's end position
  ParallelMode mode = ParallelMode::kTensor;
};

class ModelOps {
 public:
  virtual ~ModelOps() = default;

  // Weights, prepared once before the first step.
  // y = x W^T for W the parts' rows stacked (q|k|v, gate|up); bf16 or f32.
  virtual WeightId PrepareMatrix(std::span<const TensorView> parts) = 0;
  // The parts concatenated (norm weights, biases), kept in f32.
  virtual WeightId PrepareVector(std::span<const TensorView> parts) = 0;
  // The token embedding table [vocab, hidden].
  virtual void PrepareEmbedding(const TensorView& table) = 0;
  // Output rows [row_begin, row_end) over inputs [col_begin, col_end) of a
  // prepared matrix, as a matrix of its own over the same memory (no copy).
  virtual WeightId SliceMatrix(WeightId matrix, int64_t row_begin, int64_t row_end, int64_t col_begin,
                               int64_t col_end) = 0;

  // Sizes the step's activations and lays out its attention (block tables,
  // tree masks) and RoPE angles.
  virtual void BeginStep(const StepRows& rows) = 0;
  // x = the embedding rows of the step's tokens.
  virtual void Embed(Activation x) = 0;
  // out = RMSNorm(in) * weight.
  virtual void RmsNorm(Activation in, WeightId weight, Activation out) = 0;
  // out = in W^T; `in` is read up to W's input width (the first half of
  // kGateUp after SiluMul).
  virtual void Matmul(Activation in, WeightId matrix, Activation out) = 0;
  // On every row's q|k|v of this rank's heads: + bias, per-head RMSNorm of
  // q and k (Qwen3), RoPE of q and k at the row's position. Ids may be
  // kNoWeight.
  virtual void PrepareQk(Activation qkv_heads, WeightId bias, WeightId q_norm, WeightId k_norm) = 0;
  // SP mode: one all-to-all in the SP group turns this rank's rows of the
  // group's heads (kQkv) into every row of this rank's heads (kQkvHeads),
  // and one turns the attention output back (kAttnHeads -> kAttn). No-ops
  // otherwise.
  virtual void SequenceToHeads(Activation qkv_rows, Activation qkv_heads) = 0;
  virtual void HeadsToSequence(Activation attn_heads, Activation attn_rows) = 0;
  // Stores every row's k and v in the KV cache of `layer`.
  virtual void WriteKv(int layer, Activation qkv) = 0;
  // out = causal (or tree-masked) attention of every row's q over `layer`'s
  // cache, GQA.
  virtual void Attention(int layer, Activation qkv, Activation out) = 0;
  // x += delta; out = RMSNorm(x) * weight.
  virtual void AddRmsNorm(Activation x, Activation delta, WeightId weight, Activation out) = 0;
  // Every row holds `groups` [gate | up] groups of equal width; its first
  // half becomes silu(gate) * up, group after group.
  virtual void SiluMul(Activation gate_up, int groups) = 0;
  // x += delta.
  virtual void Add(Activation x, Activation delta) = 0;
  // out row i = RMSNorm(in row logit_rows[i]) * weight, on every rank.
  virtual void GatherRmsNorm(Activation in, WeightId weight, Activation out) = 0;
  // logits = in W^T over the logit rows: host memory, vocab floats per row,
  // on rank 0 (null on the others). Over several ranks `matrix` is this
  // rank's vocabulary slice (vocab-parallel) and rank 0 gathers the slices.
  virtual void Logits(Activation in, WeightId matrix, float* logits) = 0;
  // SwiftKV, TP mode only. ProjectKv: for every row, [k | v] = in W^T (W
  // this rank's KV heads, all k rows then all v rows), RoPE on k at the
  // row's position, stored in `layer`'s cache: the KV of a layer most rows
  // never run.
  virtual void ProjectKv(int layer, Activation in, WeightId kv_matrix) = 0;
  // The step goes on over a subset of its rows, laid out by `rows` as
  // BeginStep would (same max_context); kept[i] is the current index of new
  // row i (ascending). Activation `x`'s kept rows carry over; the others'
  // contents are undefined after this.
  virtual void NarrowStep(const StepRows& rows, std::span<const int64_t> kept, Activation x) = 0;
  // x = the sum of x over the ranks holding the same rows (the row-parallel
  // projections' partial sums): every rank in the TP mode, the TP group in
  // the SP mode. Called only where that is more than this rank.
  virtual void AllReduce(Activation x) = 0;
};

}  // namespace floe
