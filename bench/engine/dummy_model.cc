#include "bench/engine/dummy_model.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/model/weight_fill.h"

namespace floe {

TensorView DummyModel::Make(const std::string& name, std::vector<int64_t> shape, bool norm) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  buffers.emplace_back(new uint16_t[n]);
  uint16_t* data = buffers.back().get();
  if (norm) {
    std::fill(data, data + n, F32ToBf16(1.0f));
  } else {
    FillNormal(DType::kBF16, 0, name, 0.02f, data, n);
  }
  return TensorView{DType::kBF16, shape, data};
}

std::unique_ptr<DummyModel> BuildModel(const std::string& preset) {
  auto config = PresetConfig(preset);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return nullptr;
  }
  return BuildModel(*config);
}

std::unique_ptr<DummyModel> BuildModel(const ModelConfig& config) {
  auto model = std::make_unique<DummyModel>();
  ModelConfig& c = model->config = config;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t in = c.intermediate_size;
  model->weights.embed_tokens = model->Make("embed", {c.vocab_size, h}, false);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("l", i, ".");
    LayerWeights l;
    l.input_norm = model->Make(p + "in", {h}, true);
    l.post_attention_norm = model->Make(p + "post", {h}, true);
    l.q_proj = model->Make(p + "q", {q, h}, false);
    l.k_proj = model->Make(p + "k", {kv, h}, false);
    l.v_proj = model->Make(p + "v", {kv, h}, false);
    l.o_proj = model->Make(p + "o", {h, q}, false);
    l.gate_proj = model->Make(p + "gate", {in, h}, false);
    l.up_proj = model->Make(p + "up", {in, h}, false);
    l.down_proj = model->Make(p + "down", {h, in}, false);
    if (c.architecture == Architecture::kLlamaSwiftKV && i >= c.num_key_value_layers) {
      l.q_proj_swiftkv = model->Make(p + "q_swiftkv", {q, h}, false);
      l.k_proj_swiftkv = model->Make(p + "k_swiftkv", {kv, h}, false);
      l.v_proj_swiftkv = model->Make(p + "v_swiftkv", {kv, h}, false);
    }
    model->weights.layers.push_back(l);
  }
  model->weights.final_norm = model->Make("norm", {h}, true);
  if (c.architecture == Architecture::kLlamaSwiftKV) model->weights.norm_swiftkv = model->Make("norm_swiftkv", {h}, true);
  model->weights.lm_head =
      c.tie_word_embeddings ? model->weights.embed_tokens : model->Make("lm_head", {c.vocab_size, h}, false);
  return model;
}

}  // namespace floe
