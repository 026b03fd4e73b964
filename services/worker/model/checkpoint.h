// A loaded model: its config and every weight as a view into memory the
// Checkpoint owns (mmapped safetensors, or seeded random buffers for
// --load-format dummy). Loading validates names, shapes and dtypes up front, so
// the forward pass never meets a missing or malformed tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor/tensor_view.h"
#include "services/worker/model/model_config.h"

namespace floe {

struct LayerWeights {
  TensorView input_norm;           // [hidden]
  TensorView q_proj;               // [heads*head_dim, hidden]
  TensorView k_proj;               // [kv_heads*head_dim, hidden]
  TensorView v_proj;               // [kv_heads*head_dim, hidden]
  TensorView q_bias, k_bias, v_bias;  // [out] when config.attention_bias, else absent
  TensorView q_norm, k_norm;       // [head_dim] when config.qk_norm, else absent
  TensorView o_proj;               // [hidden, heads*head_dim]
  TensorView post_attention_norm;  // [hidden]
  TensorView gate_proj;            // [intermediate, hidden]
  TensorView up_proj;              // [intermediate, hidden]
  TensorView down_proj;            // [hidden, intermediate]
  // SwiftKV checkpoints, layers >= num_key_value_layers: the query and the
  // KV projections used when the layer's KV come from norm_swiftkv's output.
  TensorView q_proj_swiftkv;       // [heads*head_dim, hidden]
  TensorView k_proj_swiftkv;       // [kv_heads*head_dim, hidden]
  TensorView v_proj_swiftkv;       // [kv_heads*head_dim, hidden]
};

struct ModelWeights {
  TensorView embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  TensorView final_norm;    // [hidden]
  TensorView norm_swiftkv;  // [hidden]; SwiftKV checkpoints only
  TensorView lm_head;       // [vocab, hidden]; aliases embed_tokens when tied
  // A compressed-tensors kv_cache_scheme's per-tensor scales: layer i's
  // self_attn.k_scale at [2i], v_scale at [2i + 1]; empty without a scheme.
  std::vector<float> kv_scales;
};

enum class LoadFormat { kAuto, kSafetensors, kDummy };

struct LoadOptions {
  LoadFormat format = LoadFormat::kAuto;
  // Weights of a dummy load: bf16 by default, as the benchmarks use. They
  // are dense even for a quantized config.json, whose quantization_config
  // the dummy load then drops.
  DType dummy_dtype = DType::kBF16;
  uint64_t dummy_seed = 0;
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;

  // `dir` holds config.json and, unless format is kDummy, model.safetensors or
  // model-0000N-of-0000M.safetensors with model.safetensors.index.json.
  // Weights stay in their file dtype (bf16 and f32 zero-copy); f16 is widened
  // to f32 at load. Errors name the tensor or field at fault. Tensors the
  // config does not use are ignored, except layers beyond num_hidden_layers
  // (a config that does not fit its weights). kDummy fills seeded random
  // weights (see weight_fill.h) equal to WriteRandomCheckpoint's for the same
  // seed and dtype. Any thread may call Load; the result is immutable and its
  // views stay valid as long as it lives.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Load(const std::string& dir,
                                                           const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Dtype of the Linear weights: the 8-bit one where any is quantized,
  // else the matrices' (norms may be f32 regardless).
  DType weight_dtype() const { return weight_dtype_; }
  // Identifies these weights for a cache of what is derived from them (a
  // backend's repacked matrices): config.json's bytes plus each weight file's
  // path, size and modification time, or a dummy load's seed and dtype. A file
  // rewritten in place at the same size and mtime goes unnoticed, as in make.
  const std::string& fingerprint() const { return fingerprint_; }
  // Drops the resident pages of mapped weight files; the views stay valid (a
  // read faults its page back in). For once a backend holds its own copies,
  // so the files stop counting in the process's RSS.
  virtual void ReleasePages() const {}

 protected:
  std::string fingerprint_;
  ModelConfig config_;
  ModelWeights weights_;
  DType weight_dtype_ = DType::kF32;
};

// A compressed-tensors weight_scale tensor ([rows, 1] or [rows] per channel,
// [1] or [] per tensor; f32, bf16 or f16) as one f32 scale per row;
// INVALID_ARGUMENT naming `name` for a wrong shape, dtype or a negative or
// non-finite value.
absl::StatusOr<std::vector<float>> ReadRowScales(const TensorView& scale, const std::string& name, int64_t rows,
                                                  bool per_channel);

}  // namespace floe
