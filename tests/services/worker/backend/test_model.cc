#include "tests/services/worker/backend/test_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "gtest/gtest.h"

namespace floe::testing_model {

TestModel::TestModel(Flavor flavor, DType dtype, uint64_t seed, int vocab, int layers)
    : dtype_(dtype), seed_(seed) {
  ModelConfig& c = config_;
  c.vocab_size = vocab;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5f;
  c.num_key_value_layers = layers;
  switch (flavor) {
    case Flavor::kSwiftKV:
      c.swiftkv = true;
      c.num_key_value_layers = layers / 2;
      [[fallthrough]];
    case Flavor::kLlama3:
      c.architecture = flavor == Flavor::kSwiftKV ? Architecture::kLlamaSwiftKV : Architecture::kLlama;
      c.rope_theta = 500000.0f;
      c.rope_scaling.type = "llama3";
      c.rope_scaling.factor = 32.0f;
      c.rope_scaling.low_freq_factor = 1.0f;
      c.rope_scaling.high_freq_factor = 4.0f;
      // Small, so that the smoothed band covers the test's frequencies.
      c.rope_scaling.original_max_position_embeddings = 64;
      break;
    case Flavor::kQwen2:
      c.architecture = Architecture::kQwen2;
      c.rope_theta = 1000000.0f;
      c.attention_bias = true;
      break;
    case Flavor::kQwen3:
      c.architecture = Architecture::kQwen3;
      c.rope_theta = 1000000.0f;
      c.qk_norm = true;
      break;
  }
  values_.reserve(64);
  const int64_t h = c.hidden_size, hd = c.head_dim, q = c.num_heads * hd, kv = c.num_kv_heads * hd;
  const int64_t in = c.intermediate_size;
  weights_.embed_tokens = Add("model.embed_tokens.weight", {vocab, h}, 1.0f, 0.0f, true);
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.input_norm = Add(p + "input_layernorm.weight", {h}, 0.1f, 1.0f, false);
    l.post_attention_norm = Add(p + "post_attention_layernorm.weight", {h}, 0.1f, 1.0f, false);
    l.q_proj = Add(p + "self_attn.q_proj.weight", {q, h}, 1.0f / std::sqrt(h), 0, true);
    l.k_proj = Add(p + "self_attn.k_proj.weight", {kv, h}, 1.0f / std::sqrt(h), 0, true);
    l.v_proj = Add(p + "self_attn.v_proj.weight", {kv, h}, 1.0f / std::sqrt(h), 0, true);
    l.o_proj = Add(p + "self_attn.o_proj.weight", {h, q}, 1.0f / std::sqrt(q), 0, true);
    l.gate_proj = Add(p + "mlp.gate_proj.weight", {in, h}, 1.0f / std::sqrt(h), 0, true);
    l.up_proj = Add(p + "mlp.up_proj.weight", {in, h}, 1.0f / std::sqrt(h), 0, true);
    l.down_proj = Add(p + "mlp.down_proj.weight", {h, in}, 1.0f / std::sqrt(in), 0, true);
    if (c.attention_bias) {
      l.q_bias = Add(p + "self_attn.q_proj.bias", {q}, 0.3f, 0, false);
      l.k_bias = Add(p + "self_attn.k_proj.bias", {kv}, 0.3f, 0, false);
      l.v_bias = Add(p + "self_attn.v_proj.bias", {kv}, 0.3f, 0, false);
    }
    if (c.qk_norm) {
      l.q_norm = Add(p + "self_attn.q_norm.weight", {hd}, 0.1f, 1.0f, false);
      l.k_norm = Add(p + "self_attn.k_norm.weight", {hd}, 0.1f, 1.0f, false);
    }
    if (flavor == Flavor::kSwiftKV && i >= c.num_key_value_layers) {
      l.q_proj_swiftkv = Add(p + "self_attn.q_proj_swiftkv.weight", {q, h}, 1.0f / std::sqrt(h), 0, true);
      l.k_proj_swiftkv = Add(p + "self_attn.k_proj_swiftkv.weight", {kv, h}, 1.0f / std::sqrt(h), 0, true);
      l.v_proj_swiftkv = Add(p + "self_attn.v_proj_swiftkv.weight", {kv, h}, 1.0f / std::sqrt(h), 0, true);
    }
    weights_.layers.push_back(l);
  }
  weights_.final_norm = Add("model.norm.weight", {h}, 0.1f, 1.0f, false);
  if (flavor == Flavor::kSwiftKV) weights_.norm_swiftkv = Add("model.norm_swiftkv.weight", {h}, 0.1f, 1.0f, false);
  weights_.lm_head = Add("lm_head.weight", {vocab, h}, 1.0f / std::sqrt(h), 0, true);
}

TensorView TestModel::Add(const std::string& name, std::vector<int64_t> shape, float scale,
                          float offset, bool matrix) {
  std::mt19937_64 rng(seed_ * 1000003 + values_.size());
  std::normal_distribution<float> dist(0.0f, scale);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = offset + dist(rng);
  TensorView view;
  view.shape = shape;
  if (matrix && dtype_ == DType::kBF16) {
    std::vector<uint16_t> bits(n);
    for (int64_t i = 0; i < n; ++i) {
      bits[i] = F32ToBf16(v[i]);
      v[i] = Bf16ToF32(bits[i]);
    }
    bf16_.push_back(std::move(bits));
    view.dtype = DType::kBF16;
    view.data = bf16_.back().data();
  }
  values_.emplace_back(name, std::move(v));
  if (!view.data) {
    view.dtype = DType::kF32;
    view.data = values_.back().second.data();
  }
  return view;
}

void WriteReferenceConfig(const ModelConfig& c, DType weight_dtype, int steps,
                          const std::string& dir) {
  std::ofstream cfg(dir + "/config.txt");
  cfg << "hidden_size " << c.hidden_size << "\nnum_heads " << c.num_heads << "\nnum_kv_heads "
      << c.num_kv_heads << "\nhead_dim " << c.head_dim << "\nnum_layers " << c.num_layers
      << "\nvocab_size " << c.vocab_size << "\nintermediate_size " << c.intermediate_size
      << "\nrms_norm_eps " << c.rms_norm_eps << "\nrope_theta " << c.rope_theta
      << "\nattention_bias " << c.attention_bias << "\nqk_norm " << c.qk_norm
      << "\ntie_word_embeddings " << c.tie_word_embeddings << "\n";
  if (c.rope_scaling.type == "llama3") {
    cfg << "rope_type llama3\nrope_factor " << c.rope_scaling.factor << "\nlow_freq_factor "
        << c.rope_scaling.low_freq_factor << "\nhigh_freq_factor " << c.rope_scaling.high_freq_factor
        << "\noriginal_max_position_embeddings " << c.rope_scaling.original_max_position_embeddings
        << "\n";
  }
  if (c.swiftkv) cfg << "swiftkv 1\nnum_key_value_layers " << c.num_key_value_layers << "\n";
  // bf16 and 8-bit weights: the kernels round linear inputs to bf16.
  cfg << "bf16_linear_inputs " << (weight_dtype == DType::kBF16 || IsQuantized(weight_dtype)) << "\n";
  cfg << "steps " << steps << "\n";
}

void TestModel::WriteReferenceFiles(const std::string& dir, int steps) const {
  WriteReferenceConfig(config_, dtype_, steps, dir);
  for (const auto& [name, v] : values_) {
    std::ofstream f(dir + "/" + name + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

Generation Generate(Backend& backend, const std::vector<int32_t>& prompt, int steps, int chunk,
                    int block_size, int first_block, int max_blocks, bool last_logits_only) {
  const int vocab = backend.config().vocab_size;
  std::vector<int32_t> table(max_blocks);
  for (int i = 0; i < max_blocks; ++i) table[i] = first_block + max_blocks - 1 - i;
  Generation g;
  const int n = static_cast<int>(prompt.size());
  if (chunk <= 0) chunk = n;
  for (int start = 0; start < n; start += chunk) {
    const int len = std::min(chunk, n - start);
    ForwardSequence seq;
    seq.tokens = {prompt.data() + start, static_cast<size_t>(len)};
    seq.start_pos = start;
    seq.block_table = {table.data(), static_cast<size_t>((start + len + block_size - 1) / block_size)};
    const int rows = !last_logits_only ? len : start + len == n ? 1 : 0;
    seq.num_logits = rows;
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    absl::Status st = backend.Forward({&seq, 1}, logits.data());
    EXPECT_TRUE(st.ok()) << st;
    const std::span<const float> hidden = backend.LastHiddenStates();
    const size_t h = backend.config().hidden_size;
    EXPECT_EQ(hidden.size(), rows * h);
    for (int i = 0; i < rows; ++i) {
      g.prompt_logits.emplace_back(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
      if (hidden.size() == rows * h) g.prompt_hidden.emplace_back(hidden.begin() + i * h, hidden.begin() + (i + 1) * h);
    }
  }
  std::vector<float> last = g.prompt_logits.back();
  for (int s = 0; s < steps; ++s) {
    const int32_t tok = Argmax(last);
    g.tokens.push_back(tok);
    g.step_logits.push_back(last);
    if (s + 1 == steps) break;
    const int pos = n + s;
    ForwardSequence seq;
    seq.tokens = {&g.tokens.back(), 1};
    seq.start_pos = pos;
    seq.block_table = {table.data(), static_cast<size_t>((pos + 1 + block_size - 1) / block_size)};
    seq.num_logits = 1;
    absl::Status st = backend.Forward({&seq, 1}, last.data());
    EXPECT_TRUE(st.ok()) << st;
  }
  return g;
}

}  // namespace floe::testing_model
