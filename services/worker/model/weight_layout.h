// Which tensors a config implies, with their Hugging Face names and shapes, and
// where each lands in ModelWeights. The loader, the dummy loader and the
// checkpoint writer all walk this one list, so they cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor/tensor_view.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/model_config.h"

namespace floe {

enum class WeightKind {
  kMatrix,  // embeddings and projections: all share one dtype
  kNorm,    // RMSNorm scales (1.0 when generated)
  kBias,
};

struct WeightSpec {
  std::string name;  // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  WeightKind kind = WeightKind::kMatrix;
  int layer = -1;  // -1: a model-level tensor
  TensorView LayerWeights::*layer_field = nullptr;
  TensorView ModelWeights::*model_field = nullptr;
};

// Every tensor the config requires, in checkpoint order. lm_head.weight is
// left out when the embeddings are tied (Checkpoint aliases it instead).
std::vector<WeightSpec> ExpectedWeights(const ModelConfig& config);

// The slot `spec` fills; `weights.layers` must already hold num_layers entries.
TensorView& WeightSlot(ModelWeights& weights, const WeightSpec& spec);

// The Linear module (spec's name without ".weight") whose weight a
// compressed-tensors quantization_config quantizes, or "" when it keeps its
// dense dtype (no quantization, not a Linear layer, or in `ignore`). The
// embeddings are not a Linear layer.
std::string QuantizedLinear(const WeightQuantization& q, const WeightSpec& spec);

}  // namespace floe
