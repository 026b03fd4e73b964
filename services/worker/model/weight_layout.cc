#include "services/worker/model/weight_layout.h"

#include "absl/strings/strip.h"

#include "absl/strings/str_cat.h"

namespace floe {

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_out = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_out = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  const int64_t inter = c.intermediate_size;
  std::vector<WeightSpec> out;
  auto model = [&](std::string name, std::vector<int64_t> shape, WeightKind kind,
                   TensorView ModelWeights::*field) {
    WeightSpec spec;
    spec.name = std::move(name);
    spec.shape = std::move(shape);
    spec.kind = kind;
    spec.model_field = field;
    out.push_back(std::move(spec));
  };
  model("model.embed_tokens.weight", {c.vocab_size, hidden}, WeightKind::kMatrix,
        &ModelWeights::embed_tokens);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const std::string prefix = absl::StrCat("model.layers.", layer, ".");
    auto add = [&](const char* suffix, std::vector<int64_t> shape, WeightKind kind,
                   TensorView LayerWeights::*field) {
      WeightSpec spec;
      spec.name = absl::StrCat(prefix, suffix);
      spec.shape = std::move(shape);
      spec.kind = kind;
      spec.layer = layer;
      spec.layer_field = field;
      out.push_back(std::move(spec));
    };
    add("input_layernorm.weight", {hidden}, WeightKind::kNorm, &LayerWeights::input_norm);
    add("self_attn.q_proj.weight", {q_out, hidden}, WeightKind::kMatrix, &LayerWeights::q_proj);
    add("self_attn.k_proj.weight", {kv_out, hidden}, WeightKind::kMatrix, &LayerWeights::k_proj);
    add("self_attn.v_proj.weight", {kv_out, hidden}, WeightKind::kMatrix, &LayerWeights::v_proj);
    // A SwiftKV checkpoint keeps the dense projections too (its swiftkv:
    // false mode, and the teacher it was distilled from).
    if (c.architecture == Architecture::kLlamaSwiftKV && layer >= c.num_key_value_layers) {
      add("self_attn.q_proj_swiftkv.weight", {q_out, hidden}, WeightKind::kMatrix, &LayerWeights::q_proj_swiftkv);
      add("self_attn.k_proj_swiftkv.weight", {kv_out, hidden}, WeightKind::kMatrix, &LayerWeights::k_proj_swiftkv);
      add("self_attn.v_proj_swiftkv.weight", {kv_out, hidden}, WeightKind::kMatrix, &LayerWeights::v_proj_swiftkv);
    }
    if (c.attention_bias) {
      add("self_attn.q_proj.bias", {q_out}, WeightKind::kBias, &LayerWeights::q_bias);
      add("self_attn.k_proj.bias", {kv_out}, WeightKind::kBias, &LayerWeights::k_bias);
      add("self_attn.v_proj.bias", {kv_out}, WeightKind::kBias, &LayerWeights::v_bias);
    }
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", {c.head_dim}, WeightKind::kNorm, &LayerWeights::q_norm);
      add("self_attn.k_norm.weight", {c.head_dim}, WeightKind::kNorm, &LayerWeights::k_norm);
    }
    add("self_attn.o_proj.weight", {hidden, q_out}, WeightKind::kMatrix, &LayerWeights::o_proj);
    add("post_attention_layernorm.weight", {hidden}, WeightKind::kNorm,
        &LayerWeights::post_attention_norm);
    add("mlp.gate_proj.weight", {inter, hidden}, WeightKind::kMatrix, &LayerWeights::gate_proj);
    add("mlp.up_proj.weight", {inter, hidden}, WeightKind::kMatrix, &LayerWeights::up_proj);
    add("mlp.down_proj.weight", {hidden, inter}, WeightKind::kMatrix, &LayerWeights::down_proj);
  }
  model("model.norm.weight", {hidden}, WeightKind::kNorm, &ModelWeights::final_norm);
  if (c.architecture == Architecture::kLlamaSwiftKV && c.num_key_value_layers < c.num_layers) {
    model("model.norm_swiftkv.weight", {hidden}, WeightKind::kNorm, &ModelWeights::norm_swiftkv);
  }
  if (!c.tie_word_embeddings) {
    model("lm_head.weight", {c.vocab_size, hidden}, WeightKind::kMatrix, &ModelWeights::lm_head);
  }
  return out;
}

TensorView& WeightSlot(ModelWeights& weights, const WeightSpec& spec) {
  if (spec.layer < 0) return weights.*(spec.model_field);
  return weights.layers[spec.layer].*(spec.layer_field);
}

std::string QuantizedLinear(const WeightQuantization& q, const WeightSpec& spec) {
  if (!q.enabled || spec.kind != WeightKind::kMatrix || spec.name == "model.embed_tokens.weight") return "";
  absl::string_view module = spec.name;
  if (!absl::ConsumeSuffix(&module, ".weight")) return "";
  for (const std::string& ignored : q.ignore) {
    if (module == ignored) return "";
  }
  return std::string(module);
}

}  // namespace floe
