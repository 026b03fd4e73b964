// The Llama-family forward pass (Llama 2/3, Mistral, Qwen2 with qkv bias,
// Qwen3 with q/k norm), written once over ModelOps: embedding -> layers
// (RMSNorm, fused qkv, RoPE, paged attention, o_proj, residual, RMSNorm,
// fused gate|up, SiLU*up, down, residual) -> final RMSNorm -> lm_head. Every
// backend runs this code; what differs per device is behind ModelOps.
//
// SwiftKV checkpoints (config.swiftkv): every row runs layers [0, L); then
// norm_swiftkv and each later layer's KV projection write those layers' KV
// for every row (ProjectKv), and the step narrows to the sequences' logits
// rows (NarrowStep), which alone run layers [L, N) (queries from
// q_proj_swiftkv, keys and values from the cache). A prompt chunk without
// logits stops after the KV. Such steps run in the TP mode; Arctic runs
// [0, L) in SP and the tail in TP, the seam for that is the mode argument.
//
// Create checks every weight against the config (errors name the tensor)
// and prepares them on the ops. Run takes a batch the backend has checked
// against its memory (block tables, tree shapes).
//
// Not thread-safe: the backend's Forward calls Run.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/forward_batch.h"
#include "services/worker/model/model_config.h"
#include "services/worker/model/model_ops.h"
#include "services/worker/model/parallel_layout.h"

namespace floe {

class LlamaForward {
 public:
  // `ops` must outlive the forward. `layout`: this rank's place in its
  // worker's grid (the default: one rank holding everything); the rank
  // prepares the weights it holds (its SP group's shard) and, with S > 1,
  // slices of them for the TP mode.
  static absl::StatusOr<std::unique_ptr<LlamaForward>> Create(const ModelConfig& config,
                                                               const ModelWeights& weights, ModelOps& ops,
                                                               const RankLayout* layout = nullptr);

  // Runs every sequence of the batch in `mode` (every rank the same),
  // writing its new tokens' KV and the logits rows of each sequence's last
  // num_logits tokens into `logits` (null: no logits wanted, a rank other
  // than 0).
  void Run(std::span<const ForwardSequence> batch, float* logits, ParallelMode mode = ParallelMode::kTensor);
  // Logits rows of the last Run.
  int64_t num_logit_rows() const { return static_cast<int64_t>(logit_rows_.size()); }

 private:
  // A sharded matrix: the SP mode's (the shard held) and the TP mode's (a
  // slice of it; the same with S = 1).
  struct Sharded {
    WeightId sp = kNoWeight, tp = kNoWeight;
    WeightId For(ParallelMode mode) const { return mode == ParallelMode::kSequence ? sp : tp; }
  };
  struct Layer {
    WeightId input_norm, post_norm, qkv_bias, q_norm, k_norm;
    Sharded qkv, o, gate_up, down;
    WeightId kv_swiftkv = kNoWeight;  // SwiftKV layers: this rank's [k | v] heads
  };
  LlamaForward(const ModelConfig& config, ModelOps& ops, const RankLayout& layout)
      : config_(config), ops_(ops), layout_(layout) {}

  // One layer over the step's rows; `write_kv` false: its KV is in the cache already.
  void RunLayer(int li, ParallelMode mode, bool write_kv);
  // Re-lays the step out over each sequence's logits rows (SwiftKV).
  void NarrowToLogitRows(std::span<const ForwardSequence> batch, int64_t max_context);

  ModelConfig config_;
  ModelOps& ops_;
  RankLayout layout_;
  std::vector<Layer> layers_;
  WeightId final_norm_ = kNoWeight, lm_head_ = kNoWeight, norm_swiftkv_ = kNoWeight;
  // The step's rows, rebuilt by each Run (capacity reused).
  std::vector<int32_t> tokens_, positions_;
  std::vector<int64_t> logit_rows_;
  // SwiftKV's narrowed step: its sequences, rows, and their old indices.
  std::vector<ForwardSequence> tail_batch_;
  std::vector<int32_t> tail_tokens_, tail_positions_;
  std::vector<int64_t> tail_logit_rows_, kept_;
};

}  // namespace floe
