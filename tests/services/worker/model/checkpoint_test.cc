#include "services/worker/model/checkpoint.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "common/safetensors/safetensors_writer.h"
#include "common/safetensors/sharded_safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/model/weight_layout.h"
#include "tests/services/worker/model/test_util.h"

namespace floe {
namespace {

using ::testing::HasSubstr;

// Every tensor of `a` equals the one of `b` (same dtype, shape and bytes).
void ExpectSameWeights(const Checkpoint& a, const Checkpoint& b) {
  ModelWeights wa = a.weights(), wb = b.weights();
  for (const WeightSpec& spec : ExpectedWeights(a.config())) {
    const TensorView& x = WeightSlot(wa, spec);
    const TensorView& y = WeightSlot(wb, spec);
    ASSERT_EQ(x.dtype, y.dtype) << spec.name;
    ASSERT_EQ(x.shape, y.shape) << spec.name;
    ASSERT_EQ(0, std::memcmp(x.data, y.data, x.bytes())) << spec.name;
  }
}

void ExpectShapes(const Checkpoint& checkpoint) {
  const ModelConfig& c = checkpoint.config();
  const ModelWeights& w = checkpoint.weights();
  int64_t hidden = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim,
          kv = int64_t{c.num_kv_heads} * c.head_dim, inter = c.intermediate_size;
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(w.embed_tokens.shape, (Shape{c.vocab_size, hidden}));
  EXPECT_EQ(w.lm_head.shape, (Shape{c.vocab_size, hidden}));
  EXPECT_EQ(w.final_norm.shape, Shape{hidden});
  ASSERT_EQ(w.layers.size(), static_cast<size_t>(c.num_layers));
  for (const LayerWeights& l : w.layers) {
    EXPECT_EQ(l.input_norm.shape, Shape{hidden});
    EXPECT_EQ(l.q_proj.shape, (Shape{q, hidden}));
    EXPECT_EQ(l.k_proj.shape, (Shape{kv, hidden}));
    EXPECT_EQ(l.v_proj.shape, (Shape{kv, hidden}));
    EXPECT_EQ(l.o_proj.shape, (Shape{hidden, q}));
    EXPECT_EQ(l.post_attention_norm.shape, Shape{hidden});
    EXPECT_EQ(l.gate_proj.shape, (Shape{inter, hidden}));
    EXPECT_EQ(l.up_proj.shape, (Shape{inter, hidden}));
    EXPECT_EQ(l.down_proj.shape, (Shape{hidden, inter}));
    EXPECT_EQ(l.q_bias.present(), c.attention_bias);
    EXPECT_EQ(l.q_norm.present(), c.qk_norm);
    EXPECT_TRUE(l.input_norm.present() && l.q_proj.present() && l.down_proj.present());
  }
}

class CheckpointTest : public TempDirTest {
 protected:
  std::unique_ptr<Checkpoint> LoadOk(const std::string& dir, LoadOptions options = {}) {
    auto checkpoint = Checkpoint::Load(dir, options);
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    return checkpoint.ok() ? std::move(*checkpoint) : nullptr;
  }
  std::string LoadError(const std::string& dir) {
    auto checkpoint = Checkpoint::Load(dir, {});
    EXPECT_FALSE(checkpoint.ok());
    return std::string(checkpoint.status().message());
  }
  std::string WriteTiny(const std::string& name, DType dtype, uint64_t seed = 7, int shards = 1,
                        const std::string& arch = "") {
    CheckpointSpec spec;
    spec.dtype = dtype;
    spec.seed = seed;
    spec.num_shards = shards;
    spec.architecture = arch;
    std::string out = Path(name);
    absl::Status status = WriteRandomCheckpoint(spec, out);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }
  // A tiny checkpoint from the layout, with `edit` free to change a tensor's
  // dtype name, shape or bytes, or return false to leave it out.
  struct Tensor {
    std::string dtype = "F32";
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::string WriteEdited(const std::string& name,
                          const std::function<bool(const std::string&, Tensor&)>& edit) {
    std::string out = WriteTiny(name, DType::kF32);
    ModelConfig config = *PresetConfig("tiny");
    SafetensorsWriter writer;
    for (const WeightSpec& spec : ExpectedWeights(config)) {
      Tensor t;
      t.shape = spec.shape;
      int64_t numel = 1;
      for (int64_t d : spec.shape) numel *= d;
      t.bytes.assign(numel * 4, 0);
      if (!edit(spec.name, t)) continue;
      EXPECT_TRUE(writer.Add(spec.name, t.dtype, t.shape, t.bytes).ok()) << spec.name;
    }
    EXPECT_TRUE(writer.Write(out + "/model.safetensors").ok());
    return out;
  }
};

TEST_F(CheckpointTest, RoundTripBf16IsZeroCopyAndMatchesDummy) {
  std::string dir = WriteTiny("bf16", DType::kBF16);
  auto loaded = LoadOk(dir);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->weight_dtype(), DType::kBF16);
  EXPECT_EQ(loaded->config().architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(loaded->config().torch_dtype, "bfloat16");
  ExpectShapes(*loaded);
  EXPECT_NE(loaded->weights().lm_head.data, loaded->weights().embed_tokens.data);  // untied
  EXPECT_EQ(ValueAt(loaded->weights().final_norm, 0), 1.0f);

  LoadOptions dummy;
  dummy.format = LoadFormat::kDummy;
  dummy.dummy_seed = 7;
  dummy.dummy_dtype = DType::kBF16;
  auto generated = LoadOk(dir, dummy);
  ASSERT_NE(generated, nullptr);
  ExpectSameWeights(*loaded, *generated);
}

TEST_F(CheckpointTest, RoundTripF32) {
  auto loaded = LoadOk(WriteTiny("f32", DType::kF32));
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->weight_dtype(), DType::kF32);
  ExpectShapes(*loaded);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(loaded->weights().layers[1].q_proj.data) % 4, 0u);
}

TEST_F(CheckpointTest, F16IsWidenedToF32Exactly) {
  auto f16 = LoadOk(WriteTiny("f16", DType::kF16));
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->weight_dtype(), DType::kF32);
  ExpectShapes(*f16);
  LoadOptions dummy;
  dummy.format = LoadFormat::kDummy;
  dummy.dummy_seed = 7;
  dummy.dummy_dtype = DType::kF16;
  auto generated = LoadOk(Path("f16"), dummy);
  ExpectSameWeights(*f16, *generated);
  // Every widened value is an f16 value.
  const TensorView& q = f16->weights().layers[0].q_proj;
  for (int64_t i = 0; i < q.numel(); ++i) {
    float v = ValueAt(q, i);
    ASSERT_EQ(F16ToF32(F32ToF16(v)), v);
  }
}

TEST_F(CheckpointTest, ShardedEqualsSingleFile) {
  auto single = LoadOk(WriteTiny("single", DType::kBF16, 3));
  auto sharded = LoadOk(WriteTiny("sharded", DType::kBF16, 3, /*shards=*/3));
  ASSERT_NE(single, nullptr);
  ASSERT_NE(sharded, nullptr);
  for (int s = 1; s <= 3; ++s) {
    EXPECT_TRUE(std::filesystem::exists(Path("sharded/model-0000" + std::to_string(s) +
                                             "-of-00003.safetensors")));
  }
  EXPECT_TRUE(std::filesystem::exists(Path("sharded/model.safetensors.index.json")));
  EXPECT_FALSE(std::filesystem::exists(Path("sharded/model.safetensors")));
  ExpectSameWeights(*single, *sharded);
}

TEST_F(CheckpointTest, TiedEmbeddingsAliasLmHead) {
  std::string dir = WriteEdited("tied", [](const std::string& name, Tensor&) {
    return name != "lm_head.weight";
  });
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["tie_word_embeddings"] = true;
  std::ofstream(dir + "/config.json") << config.dump();
  auto loaded = LoadOk(dir);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->weights().lm_head.data, loaded->weights().embed_tokens.data);
  EXPECT_EQ(loaded->weights().lm_head.shape, loaded->weights().embed_tokens.shape);
}

TEST_F(CheckpointTest, Qwen2AndQwen3VariantsLoadTheirExtraTensors) {
  auto qwen2 = LoadOk(WriteTiny("qwen2", DType::kBF16, 1, 1, "Qwen2ForCausalLM"));
  ASSERT_NE(qwen2, nullptr);
  EXPECT_TRUE(qwen2->config().attention_bias);
  ExpectShapes(*qwen2);
  const LayerWeights& l2 = qwen2->weights().layers[1];
  EXPECT_EQ(l2.q_bias.shape, std::vector<int64_t>{64});
  EXPECT_EQ(l2.k_bias.shape, std::vector<int64_t>{32});
  EXPECT_EQ(l2.v_bias.shape, std::vector<int64_t>{32});
  EXPECT_NE(ValueAt(l2.q_bias, 0), 0.0f);

  auto qwen3 = LoadOk(WriteTiny("qwen3", DType::kF32, 1, 2, "Qwen3ForCausalLM"));
  ASSERT_NE(qwen3, nullptr);
  EXPECT_TRUE(qwen3->config().qk_norm);
  ExpectShapes(*qwen3);
  const LayerWeights& l3 = qwen3->weights().layers[0];
  EXPECT_EQ(l3.q_norm.shape, std::vector<int64_t>{16});
  EXPECT_EQ(l3.k_norm.shape, std::vector<int64_t>{16});
  EXPECT_EQ(ValueAt(l3.k_norm, 15), 1.0f);

  // A Qwen2 config over Llama weights: the first bias is reported missing.
  std::string dir = WriteTiny("llama", DType::kBF16);
  std::filesystem::copy_file(Path("qwen2/config.json"), dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_THAT(LoadError(dir), HasSubstr("missing tensor model.layers.0.self_attn.q_proj.bias"));
}

// floe make-model --preset tiny-swiftkv: the public SwiftKV checkpoints'
// format (config and tensor names as Arctic's LlamaSwiftKVForCausalLM reads
// them), loaded back; the later layers keep their dense q/k/v too.
TEST_F(CheckpointTest, SwiftKVCheckpointLoadsItsExtraTensors) {
  CheckpointSpec spec;
  spec.preset = "tiny-swiftkv";
  spec.dtype = DType::kBF16;
  const std::string dir = Path("swiftkv");
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir).ok());
  std::ifstream config_file(dir + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(config_file);
  EXPECT_EQ(config["architectures"][0], "LlamaSwiftKVForCausalLM");
  EXPECT_EQ(config["model_type"], "llama_swiftkv");
  EXPECT_EQ(config["swiftkv"], true);
  EXPECT_EQ(config["num_key_value_layers"], 2);
  EXPECT_EQ(config["num_hidden_layers"], 4);
  auto checkpoint = LoadOk(dir);
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_TRUE(checkpoint->config().swiftkv);
  EXPECT_EQ(checkpoint->config().dense_layers(), 2);
  ExpectShapes(*checkpoint);
  const ModelWeights& w = checkpoint->weights();
  EXPECT_EQ(w.norm_swiftkv.shape, std::vector<int64_t>{64});
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w.layers[i].q_proj_swiftkv.present(), i >= 2) << i;
    EXPECT_EQ(w.layers[i].k_proj_swiftkv.present(), i >= 2) << i;
    EXPECT_EQ(w.layers[i].v_proj_swiftkv.present(), i >= 2) << i;
  }
  EXPECT_EQ(w.layers[3].q_proj_swiftkv.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(w.layers[3].k_proj_swiftkv.shape, (std::vector<int64_t>{32, 64}));

  // A config that moves the SwiftKV boundary down to layer 1 finds layer 1's
  // SwiftKV projections missing, and names the first.
  nlohmann::json edited = config;
  edited["num_key_value_layers"] = 1;
  std::ofstream(dir + "/config.json") << edited.dump();
  EXPECT_THAT(LoadError(dir), HasSubstr("missing tensor model.layers.1.self_attn.q_proj_swiftkv.weight"));
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  std::string dir = WriteEdited("missing", [](const std::string& name, Tensor&) {
    return name != "model.layers.1.mlp.up_proj.weight";
  });
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("missing tensor model.layers.1.mlp.up_proj.weight"));
  EXPECT_THAT(error, HasSubstr("model.safetensors"));
}

TEST_F(CheckpointTest, WrongShapeNamesTensorAndBothShapes) {
  std::string dir = WriteEdited("shape", [](const std::string& name, Tensor& t) {
    if (name == "model.layers.0.self_attn.k_proj.weight") {
      t.shape = {64, 32};  // the full head count instead of the kv heads
      t.bytes.resize(64 * 32 * 4);
    }
    return true;
  });
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("model.layers.0.self_attn.k_proj.weight"));
  EXPECT_THAT(error, HasSubstr("[64, 32]"));
  EXPECT_THAT(error, HasSubstr("[32, 64]"));
}

TEST_F(CheckpointTest, UnsupportedDTypeIsNamed) {
  std::string dir = WriteEdited("f8e5m2", [](const std::string& name, Tensor& t) {
    if (name == "model.layers.1.self_attn.o_proj.weight") {
      t.dtype = "F8_E5M2";
      t.bytes.resize(t.bytes.size() / 4);
    }
    return true;
  });
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("model.layers.1.self_attn.o_proj.weight"));
  EXPECT_THAT(error, HasSubstr("F8_E5M2"));
  // I8 is a quantized type: without a quantization_config it is named as such.
  dir = WriteEdited("i8", [](const std::string& name, Tensor& t) {
    if (name == "model.layers.1.self_attn.o_proj.weight") {
      t.dtype = "I8";
      t.bytes.resize(t.bytes.size() / 4);
    }
    return true;
  });
  error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("model.layers.1.self_attn.o_proj.weight is i8 but quantization_config does not"));
}

TEST_F(CheckpointTest, MixedMatrixDTypesAreRejected) {
  std::string dir = WriteEdited("mixed", [](const std::string& name, Tensor& t) {
    if (name == "model.layers.0.mlp.down_proj.weight") {
      t.dtype = "BF16";
      t.bytes.resize(t.bytes.size() / 2);
    }
    return true;
  });
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("mixed matrix dtypes"));
  EXPECT_THAT(error, HasSubstr("model.layers.0.mlp.down_proj.weight"));
  // Norms may differ from the matrices (f32 norms next to bf16 matrices are common).
  dir = WriteEdited("f32norms", [](const std::string& name, Tensor& t) {
    if (name.find("norm") == std::string::npos) {
      t.dtype = "BF16";
      t.bytes.resize(t.bytes.size() / 2);
    }
    return true;
  });
  auto loaded = LoadOk(dir);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->weight_dtype(), DType::kBF16);
  EXPECT_EQ(loaded->weights().final_norm.dtype, DType::kF32);
}

TEST_F(CheckpointTest, ExtraLayersMeanTheConfigDoesNotFit) {
  std::string dir = WriteEdited("extra", [](const std::string&, Tensor&) { return true; });
  SafetensorsWriter writer;  // rewrite with one more layer's tensor
  auto file = ShardedSafetensors::OpenDirectory(dir);
  ASSERT_TRUE(file.ok());
  for (const std::string& name : file->names()) {
    TensorView v = *file->Get(name);
    const auto* p = static_cast<const uint8_t*>(v.data);
    ASSERT_TRUE(writer.Add(name, v.dtype, v.shape, std::vector<uint8_t>(p, p + v.bytes())).ok());
  }
  ASSERT_TRUE(writer.Add("model.layers.2.input_layernorm.weight", DType::kF32, {64},
                         std::vector<uint8_t>(256)).ok());
  file = absl::UnknownError("closed");
  ASSERT_TRUE(writer.Write(dir + "/model.safetensors").ok());
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("model.layers.2.input_layernorm.weight"));
  EXPECT_THAT(error, HasSubstr("num_hidden_layers 2"));
}

// A compressed-tensors kv_cache_scheme (a KV-only checkpoint: dense
// weights): every layer's self_attn.k_scale and v_scale ([] or [1]; f32 or
// bf16) land in ModelWeights::kv_scales; a missing one is named.
TEST_F(CheckpointTest, KvCacheSchemeScalesAreRead) {
  const auto write = [&](const std::string& name, bool drop_one) {
    std::string dir = WriteTiny(name, DType::kBF16);
    SafetensorsWriter writer;
    {
      auto file = ShardedSafetensors::OpenDirectory(dir);
      EXPECT_TRUE(file.ok());
      for (const std::string& t : file->names()) {
        TensorView v = *file->Get(t);
        const auto* p = static_cast<const uint8_t*>(v.data);
        EXPECT_TRUE(writer.Add(t, v.dtype, v.shape, std::vector<uint8_t>(p, p + v.bytes())).ok());
      }
    }
    for (int layer = 0; layer < 2; ++layer) {
      const float k = 0.5f + layer, v = 0.25f * (layer + 1);
      std::vector<uint8_t> kb(4), vb(2);
      std::memcpy(kb.data(), &k, 4);
      const uint16_t v16 = F32ToBf16(v);
      std::memcpy(vb.data(), &v16, 2);
      const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
      EXPECT_TRUE(writer.Add(prefix + "k_scale", DType::kF32, {}, kb).ok());
      if (!(drop_one && layer == 1)) EXPECT_TRUE(writer.Add(prefix + "v_scale", DType::kBF16, {1}, vb).ok());
    }
    EXPECT_TRUE(writer.Write(dir + "/model.safetensors").ok());
    std::ifstream in(dir + "/config.json");
    auto config = ModelConfig::FromJson(std::string(std::istreambuf_iterator<char>(in), {}));
    EXPECT_TRUE(config.ok());
    config->quantization.kv_cache_scales = true;
    std::ofstream(dir + "/config.json", std::ios::trunc) << config->ToJson();
    return dir;
  };
  auto loaded = Checkpoint::Load(write("kvscales", false), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->get()->weights().kv_scales, (std::vector<float>{0.5f, 0.25f, 1.5f, 0.5f}));
  EXPECT_FALSE(loaded->get()->config().quantization.enabled);
  EXPECT_EQ(loaded->get()->weight_dtype(), DType::kBF16);
  EXPECT_THAT(LoadError(write("kvscales_missing", true)), HasSubstr("model.layers.1.self_attn.v_scale"));
}

TEST_F(CheckpointTest, TruncatedFile) {
  std::string dir = WriteTiny("trunc", DType::kBF16);
  std::string file = dir + "/model.safetensors";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 1000);
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("truncated"));
  EXPECT_THAT(error, HasSubstr("tensor "));
  EXPECT_THAT(error, HasSubstr(file));
}

// Rewrites the header of dir/model.safetensors through `edit`, keeping the data.
void EditHeader(const std::string& file, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes[i]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, len));
  edit(header);
  std::string text = header.dump();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(text.size() >> (8 * i)));
  out << text << bytes.substr(8 + len);
}

TEST_F(CheckpointTest, HeaderLyingAboutOffsets) {
  std::string dir = WriteTiny("lying", DType::kBF16);
  EditHeader(dir + "/model.safetensors", [](nlohmann::json& h) {
    auto& offsets = h["model.norm.weight"]["data_offsets"];
    offsets[1] = offsets[1].get<uint64_t>() + 2;  // one element more than the shape
  });
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("model.norm.weight"));
  EXPECT_THAT(error, HasSubstr("data_offsets"));
  EditHeader(dir + "/model.safetensors", [](nlohmann::json& h) {
    h["model.norm.weight"]["data_offsets"] = {1ull << 40, (1ull << 40) + 128};
  });
  EXPECT_THAT(LoadError(dir), HasSubstr("past the data section"));
}

TEST_F(CheckpointTest, HeaderLengthBeyondFile) {
  std::string dir = WriteTiny("len", DType::kBF16);
  std::fstream f(dir + "/model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(6);
  f.put(0x7f);  // header length ~2^54
  f.close();
  EXPECT_THAT(LoadError(dir), HasSubstr("runs past the end of the file"));
}

TEST_F(CheckpointTest, InvalidJsonHeader) {
  std::string dir = WriteTiny("json", DType::kBF16);
  std::fstream f(dir + "/model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(8);
  f.put('[');
  f.put('{');
  f.close();
  std::string error = LoadError(dir);
  EXPECT_THAT(error, HasSubstr("not valid JSON"));
  EXPECT_THAT(error, HasSubstr("model.safetensors"));
}

TEST_F(CheckpointTest, ConfigErrorsNameTheField) {
  std::string dir = WriteTiny("cfg", DType::kBF16);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config.erase("num_attention_heads");
  std::ofstream(dir + "/config.json") << config.dump();
  EXPECT_THAT(LoadError(dir), HasSubstr("num_attention_heads"));
  config["num_attention_heads"] = 4;
  config["architectures"] = {"FalconForCausalLM"};
  std::ofstream(dir + "/config.json") << config.dump();
  EXPECT_THAT(LoadError(dir), HasSubstr("FalconForCausalLM"));
  std::filesystem::remove(dir + "/config.json");
  EXPECT_THAT(LoadError(dir), HasSubstr("config.json"));
}

TEST_F(CheckpointTest, NoWeightFiles) {
  std::string dir = WriteTiny("empty", DType::kBF16);
  std::filesystem::remove(dir + "/model.safetensors");
  EXPECT_THAT(LoadError(dir), HasSubstr("model.safetensors"));
}

TEST_F(CheckpointTest, DummyIsDeterministicInTheSeed) {
  std::filesystem::create_directories(Path("cfg"));
  std::ofstream(Path("cfg/config.json")) << PresetConfig("tiny", "Qwen2ForCausalLM")->ToJson();
  LoadOptions options;
  options.format = LoadFormat::kDummy;
  options.dummy_seed = 11;
  auto a = LoadOk(Path("cfg"), options);
  auto b = LoadOk(Path("cfg"), options);
  options.dummy_seed = 12;
  auto c = LoadOk(Path("cfg"), options);
  ASSERT_TRUE(a && b && c);
  ExpectShapes(*a);
  ExpectSameWeights(*a, *b);
  EXPECT_EQ(a->weight_dtype(), DType::kBF16);
  const TensorView& x = a->weights().layers[0].gate_proj;
  const TensorView& y = c->weights().layers[0].gate_proj;
  EXPECT_NE(0, std::memcmp(x.data, y.data, x.bytes()));
  // N(0, 1) * 0.02: check the moments; norms are exactly 1.
  const TensorView& e = a->weights().embed_tokens;
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    double v = ValueAt(e, i);
    sum += v;
    sum_sq += v * v;
  }
  double mean = sum / e.numel(), stddev = std::sqrt(sum_sq / e.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(stddev, 0.02, 2e-4);
  EXPECT_EQ(ValueAt(a->weights().layers[1].post_attention_norm, 3), 1.0f);
  EXPECT_NE(ValueAt(a->weights().layers[1].v_bias, 0), 0.0f);
  // Distinct tensors get distinct streams.
  EXPECT_NE(0, std::memcmp(a->weights().layers[0].up_proj.data,
                           a->weights().layers[0].gate_proj.data, x.bytes()));
  options.dummy_dtype = DType::kF32;
  auto f = LoadOk(Path("cfg"), options);
  EXPECT_EQ(f->weight_dtype(), DType::kF32);
  EXPECT_EQ(F32ToBf16(ValueAt(f->weights().layers[0].gate_proj, 5)),
            static_cast<const uint16_t*>(y.data)[5]);
}

// The fingerprint keys the weight cache: it must change with config.json,
// with a weight file's size or mtime, and with a dummy load's seed, and stay
// put when nothing changed.
TEST_F(CheckpointTest, FingerprintFollowsConfigFilesAndSeed) {
  const std::string dir = WriteTiny("fp", DType::kBF16);
  auto a = LoadOk(dir), b = LoadOk(dir);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint().find("model.safetensors"), std::string::npos);
  const auto file = std::filesystem::path(dir) / "model.safetensors";
  std::filesystem::last_write_time(file, std::filesystem::last_write_time(file) + std::chrono::seconds(1));
  auto touched = LoadOk(dir);
  EXPECT_NE(touched->fingerprint(), a->fingerprint());
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["rms_norm_eps"] = 1e-6;
  std::ofstream(dir + "/config.json") << config.dump();
  auto edited = LoadOk(dir);
  EXPECT_NE(edited->fingerprint(), touched->fingerprint());
  LoadOptions dummy;
  dummy.format = LoadFormat::kDummy;
  dummy.dummy_seed = 1;
  auto d1 = LoadOk(dir, dummy);
  dummy.dummy_seed = 2;
  auto d2 = LoadOk(dir, dummy);
  EXPECT_NE(d1->fingerprint(), d2->fingerprint());
  EXPECT_NE(d1->fingerprint(), edited->fingerprint());
}

// Dropping the mapped files' pages keeps every view readable and unchanged.
TEST_F(CheckpointTest, ReleasePagesKeepsViewsValid) {
  const std::string dir = WriteTiny("release", DType::kBF16);
  auto released = LoadOk(dir), kept = LoadOk(dir);
  ASSERT_TRUE(released && kept);
  ExpectSameWeights(*released, *kept);
  released->ReleasePages();
  ExpectSameWeights(*released, *kept);
  LoadOptions dummy;
  dummy.format = LoadFormat::kDummy;
  auto generated = LoadOk(dir, dummy), again = LoadOk(dir, dummy);
  generated->ReleasePages();  // owned buffers: nothing to drop, nothing lost
  ExpectSameWeights(*generated, *again);
}

TEST_F(CheckpointTest, DummyLlama32_1bShapesAndFillTime) {
  std::filesystem::create_directories(Path("1b"));
  std::ofstream(Path("1b/config.json")) << PresetConfig("llama-3.2-1b")->ToJson();
  LoadOptions options;
  options.format = LoadFormat::kDummy;
  auto start = std::chrono::steady_clock::now();
  auto loaded = LoadOk(Path("1b"), options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_NE(loaded, nullptr);
  ExpectShapes(*loaded);
  EXPECT_EQ(loaded->weights().lm_head.data, loaded->weights().embed_tokens.data);
  int64_t params = 0;
  ModelWeights w = loaded->weights();
  for (const WeightSpec& spec : ExpectedWeights(loaded->config())) params += WeightSlot(w, spec).numel();
  EXPECT_EQ(params, 1235814400);  // Llama 3.2 1B
  std::printf("dummy llama-3.2-1b (%lld params, bf16) filled in %.2f s on %u threads\n",
              static_cast<long long>(params), seconds, std::thread::hardware_concurrency());
}

}  // namespace
}  // namespace floe
