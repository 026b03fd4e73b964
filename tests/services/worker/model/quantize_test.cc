// compressed-tensors checkpoints: the quantization_config parser (every
// malformed field named), make-model's quantizer (QuantizeCheckpoint) and the
// loader's handling of 8-bit weights and their scales.
#include "services/worker/model/quantize.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include "common/safetensors/safetensors_writer.h"
#include "common/safetensors/sharded_safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/checkpoint_writer.h"
#include "tests/services/worker/model/test_util.h"

namespace floe {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// The quantization_config of RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic
// (llm-compressor's FP8_DYNAMIC scheme), on a small Llama config.
Json Fp8Config() {
  return Json::parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 1000,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "max_position_embeddings": 2048,
    "quantization_config": {
      "config_groups": {"group_0": {
        "input_activations": {"actorder": null, "block_structure": null, "dynamic": true, "group_size": null,
                              "num_bits": 8, "observer": null, "observer_kwargs": {}, "strategy": "token",
                              "symmetric": true, "type": "float"},
        "output_activations": null, "targets": ["Linear"],
        "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null,
                    "num_bits": 8, "observer": "minmax", "observer_kwargs": {}, "strategy": "channel",
                    "symmetric": true, "type": "float"}}},
      "format": "float-quantized", "global_compression_ratio": 1.24, "ignore": ["lm_head"],
      "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed"}})");
}

TEST(QuantizationConfigTest, ParsesVllmFp8DynamicAndRoundTrips) {
  auto c = ModelConfig::FromJson(Fp8Config().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  const WeightQuantization& q = c->quantization;
  EXPECT_TRUE(q.enabled);
  EXPECT_TRUE(q.is_float);
  EXPECT_TRUE(q.per_channel);
  EXPECT_EQ(q.format, "float-quantized");
  EXPECT_EQ(q.ignore, std::vector<std::string>{"lm_head"});
  auto again = ModelConfig::FromJson(c->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->quantization.enabled, q.enabled);
  EXPECT_EQ(again->quantization.is_float, q.is_float);
  EXPECT_EQ(again->quantization.per_channel, q.per_channel);
  EXPECT_EQ(again->quantization.format, q.format);
  EXPECT_EQ(again->quantization.ignore, q.ignore);
  EXPECT_EQ(Json::parse(again->quantization.input_activations_json), Json::parse(q.input_activations_json));
  // No quantization_config: dense.
  Json dense = Fp8Config();
  dense.erase("quantization_config");
  EXPECT_FALSE(ModelConfig::FromJson(dense.dump())->quantization.enabled);
}

TEST(QuantizationConfigTest, IntWeightOnlyPerTensorParses) {
  Json j = Fp8Config();
  auto& group = j["quantization_config"]["config_groups"]["group_0"];
  group["weights"]["type"] = "int";
  group["weights"]["strategy"] = "tensor";
  group["input_activations"] = nullptr;
  j["quantization_config"]["format"] = "int-quantized";
  auto c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->quantization.is_float);
  EXPECT_FALSE(c->quantization.per_channel);
  EXPECT_FALSE(c->quantization.packed());
  // llm-compressor's W8A16: pack-quantized int weights, per channel.
  j["quantization_config"]["format"] = "pack-quantized";
  group["weights"]["strategy"] = "channel";
  c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->quantization.packed());
  EXPECT_TRUE(c->quantization.per_channel);
  auto again = ModelConfig::FromJson(c->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->quantization.packed());
}

// kv_cache_scheme (vLLM's fp8 KV scales) with 8-bit weights, and alone (a
// KV-only checkpoint: config_groups empty, weights dense); both round-trip.
TEST(QuantizationConfigTest, KvCacheSchemeIsReadAloneOrWithWeights) {
  const Json scheme = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", false},
                       {"symmetric", true}};
  Json with_weights = Fp8Config();
  with_weights["quantization_config"]["kv_cache_scheme"] = scheme;
  Json alone = Fp8Config();
  alone["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"config_groups", Json::object()},
                                  {"kv_cache_scheme", scheme}};
  for (const auto& [j, weights] : {std::pair{with_weights, true}, std::pair{alone, false}}) {
    auto c = ModelConfig::FromJson(j.dump());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->quantization.kv_cache_scales);
    EXPECT_EQ(c->quantization.enabled, weights);
    auto again = ModelConfig::FromJson(c->ToJson());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->quantization.kv_cache_scales);
    EXPECT_EQ(again->quantization.enabled, weights);
  }
}

// Each malformation, and the field its error must name.
TEST(QuantizationConfigTest, MalformedFieldsAreNamed) {
  const std::string g = "quantization_config.config_groups.group_0";
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& q) { q = "fp8"; }, "quantization_config: expected an object"},
      {[](Json& q) { q["quant_method"] = "fp8"; }, "quantization_config.quant_method"},
      {[](Json& q) { q.erase("quant_method"); }, "quantization_config.quant_method"},
      {[](Json& q) { q["format"] = "pack-quantized"; }, "quantization_config.format"},  // with float weights
      {[](Json& q) { q["format"] = "marlin-24"; }, "quantization_config.format"},
      {[](Json& q) { q["kv_cache_scheme"] = Json::object({{"num_bits", 8}}); }, "quantization_config.kv_cache_scheme.type"},
      {[](Json& q) { q["kv_cache_scheme"] = 8; }, "quantization_config.kv_cache_scheme: expected an object"},
      {[](Json& q) {
         q["kv_cache_scheme"] = Json::object({{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}});
       },
       "quantization_config.kv_cache_scheme.strategy"},
      {[](Json& q) {
         q["kv_cache_scheme"] =
             Json::object({{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", true}});
       },
       "quantization_config.kv_cache_scheme.dynamic"},
      {[](Json& q) { q["config_groups"]["group_1"] = q["config_groups"]["group_0"]; },
       "quantization_config.config_groups"},
      {[](Json& q) { q["config_groups"]["group_0"]["targets"] = {"re:.*mlp.*"}; }, g + ".targets"},
      {[](Json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 4; }, g + ".weights.num_bits"},
      {[](Json& q) { q["config_groups"]["group_0"]["weights"]["type"] = "nf4"; }, g + ".weights.type"},
      {[](Json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "group"; }, g + ".weights.strategy"},
      {[](Json& q) { q["config_groups"]["group_0"]["weights"]["symmetric"] = false; }, g + ".weights.symmetric"},
      {[](Json& q) { q["config_groups"]["group_0"]["weights"]["dynamic"] = true; }, g + ".weights.dynamic"},
      {[](Json& q) { q["config_groups"]["group_0"]["weights"]["group_size"] = 128; }, g + ".weights.group_size"},
      {[](Json& q) { q["config_groups"]["group_0"]["weights"] = 8; }, g + ".weights"},
      {[](Json& q) { q["config_groups"]["group_0"]["input_activations"]["num_bits"] = 4; }, g + ".input_activations"},
      {[](Json& q) { q["config_groups"]["group_0"]["output_activations"] = Json::object(); }, g + ".output_activations"},
      {[](Json& q) { q["ignore"] = "lm_head"; }, "quantization_config.ignore"},
      {[](Json& q) { q["ignore"] = {"re:.*gate"}; }, "quantization_config.ignore"},
      {[](Json& q) { q["ignore"] = {std::string(300, 'x')}; }, "quantization_config.ignore"},
  };
  for (const auto& [edit, field] : cases) {
    Json j = Fp8Config();
    edit(j["quantization_config"]);
    auto c = ModelConfig::FromJson(j.dump());
    ASSERT_FALSE(c.ok()) << "accepted: " << j["quantization_config"].dump();
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("config.json field " + field)) << c.status();
  }
}

TEST(QuantizeTest, PerChannelScalesAndRounding) {
  // Row 0: absmax 2.54 -> int8 scale 0.02; row 1 all zero -> scale 1.
  const std::vector<float> w = {2.54f, -1.27f, 0.01f, 0.03f, 0, 0, 0, 0};
  const TensorView view{DType::kF32, {2, 4}, w.data()};
  const QuantizedMatrix i8 = QuantizePerChannel(view, DType::kI8).value();
  EXPECT_FLOAT_EQ(i8.scales[0], 2.54f / 127);
  EXPECT_EQ(i8.scales[1], 1.0f);
  EXPECT_EQ(static_cast<int8_t>(i8.data[0]), 127);
  EXPECT_EQ(static_cast<int8_t>(i8.data[1]), -64);  // -63.5 rounds to even
  EXPECT_EQ(static_cast<int8_t>(i8.data[2]), 0);    // 0.5 rounds to even
  EXPECT_EQ(static_cast<int8_t>(i8.data[3]), 2);    // 1.5 rounds to even
  const QuantizedMatrix f8 = QuantizePerChannel(view, DType::kF8E4M3).value();
  EXPECT_FLOAT_EQ(f8.scales[0], 2.54f / 448);
  EXPECT_EQ(f8.data[0], 0x7e);  // 448
  for (int c = 0; c < 4; ++c) {
    const double back = F8E4M3ToF32(f8.data[c]) * f8.scales[0];
    EXPECT_NEAR(back, w[c], std::abs(w[c]) / 16 + f8.scales[0] * 0x1p-10) << c;  // 3 mantissa bits
  }
}

TEST(QuantizeTest, TakesF16AndRefusesWhatItCannotQuantize) {
  const std::vector<float> w = {0.5f, -1.25f, 3.0f, 0.0078125f, 1, 2, 3, 4};
  std::vector<uint16_t> half(w.size());
  for (size_t i = 0; i < w.size(); ++i) half[i] = F32ToF16(w[i]);  // exact in f16
  const TensorView f32{DType::kF32, {2, 4}, w.data()}, f16{DType::kF16, {2, 4}, half.data()};
  for (DType target : {DType::kI8, DType::kF8E4M3}) {
    const QuantizedMatrix a = QuantizePerChannel(f32, target).value(), b = QuantizePerChannel(f16, target).value();
    EXPECT_EQ(a.data, b.data) << DTypeName(target);
    EXPECT_EQ(a.scales, b.scales) << DTypeName(target);
  }
  // A row far below the smallest normal scale still gets a finite, normal one.
  const std::vector<float> tiny = {1e-42f, -1e-42f};
  const QuantizedMatrix t = QuantizePerChannel(TensorView{DType::kF32, {1, 2}, tiny.data()}, DType::kF8E4M3).value();
  EXPECT_TRUE(std::isnormal(t.scales[0])) << t.scales[0];
  EXPECT_EQ(F8E4M3ToF32(t.data[0]), 0.0f);

  const std::vector<float> nan = {1, NAN, 2, 3};
  EXPECT_THAT(std::string(QuantizePerChannel(TensorView{DType::kF32, {2, 2}, nan.data()}, DType::kI8)
                              .status()
                              .message()),
              HasSubstr("weight [0, 1] is nan"));
  const std::vector<uint8_t> bytes(4);
  EXPECT_THAT(std::string(QuantizePerChannel(TensorView{DType::kI8, {2, 2}, bytes.data()}, DType::kF8E4M3)
                              .status()
                              .message()),
              HasSubstr("expected a dense matrix, got i8"));
  EXPECT_FALSE(QuantizePerChannel(f32, DType::kBF16).ok());
}

class QuantizedCheckpointTest : public TempDirTest {
 protected:
  // A tiny bf16 checkpoint quantized to `target` as make-model does.
  std::string WriteQuantized(const std::string& name, DType target, const std::vector<std::string>& keep_dense = {}) {
    CheckpointSpec spec;
    spec.dtype = DType::kBF16;
    spec.seed = 3;
    EXPECT_TRUE(WriteRandomCheckpoint(spec, Path(name + "-dense")).ok());
    const absl::Status s = QuantizeCheckpoint(Path(name + "-dense"), Path(name), target, keep_dense);
    EXPECT_TRUE(s.ok()) << s;
    return Path(name);
  }
  // Rewrites dir's model.safetensors, `edit` changing a tensor's name,
  // dtype name, shape or bytes, or returning false to drop it.
  struct Tensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  using EditFn = std::function<bool(const std::string& name, Tensor&)>;
  void Edit(const std::string& dir, const EditFn& edit) {
    auto files = ShardedSafetensors::OpenDirectory(dir);
    ASSERT_TRUE(files.ok()) << files.status();
    SafetensorsWriter writer;
    for (const std::string& name : files->names()) {
      const SafetensorsFile::Raw raw = *files->GetRaw(name);
      Tensor t{name, raw.entry->dtype_name, raw.entry->shape, std::vector<uint8_t>(raw.data, raw.data + raw.bytes())};
      if (edit(name, t)) ASSERT_TRUE(writer.Add(t.name, t.dtype, t.shape, t.bytes).ok()) << name;
    }
    files = absl::NotFoundError("closed");  // unmap before the file is replaced
    ASSERT_TRUE(writer.Write(dir + "/model.safetensors.tmp").ok());
    std::filesystem::rename(dir + "/model.safetensors.tmp", dir + "/model.safetensors");
  }
  std::string LoadError(const std::string& dir) {
    auto checkpoint = Checkpoint::Load(dir, {});
    EXPECT_FALSE(checkpoint.ok());
    return std::string(checkpoint.status().message());
  }
  // Each case edits a fresh `target` checkpoint, whose load must then fail
  // with every `want` in its message.
  struct BadCase {
    EditFn edit;
    std::vector<std::string> want;
  };
  void ExpectNamedLoadErrors(DType target, const std::vector<BadCase>& cases) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string dir = WriteQuantized("case" + std::to_string(i), target);
      Edit(dir, cases[i].edit);
      const std::string error = LoadError(dir);
      for (const std::string& want : cases[i].want) EXPECT_THAT(error, HasSubstr(want)) << "case " << i;
    }
  }
};

TEST_F(QuantizedCheckpointTest, QuantizedLoadsWithScalesAndDenseLmHead) {
  for (DType target : {DType::kF8E4M3, DType::kI8}) {
    const std::string name = DTypeName(target).data();
    const std::string dir = WriteQuantized(name, target);
    auto dense = Checkpoint::Load(Path(name + "-dense"), {});
    auto loaded = Checkpoint::Load(dir, {});
    ASSERT_TRUE(loaded.ok() && dense.ok()) << loaded.status();
    const ModelConfig& c = (*loaded)->config();
    EXPECT_TRUE(c.quantization.enabled);
    EXPECT_EQ(c.quantization.is_float, target == DType::kF8E4M3);
    const ModelWeights& w = (*loaded)->weights();
    EXPECT_EQ(w.lm_head.dtype, DType::kBF16);  // ignored
    EXPECT_EQ(w.embed_tokens.dtype, DType::kBF16);
    EXPECT_EQ(w.final_norm.dtype, DType::kBF16);
    for (const LayerWeights& l : w.layers) {
      for (const TensorView* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
        EXPECT_EQ(t->dtype, target);
        ASSERT_NE(t->row_scale, nullptr);
      }
    }
    // Each weight within half a step of its dense value (fp8: relative 2^-4).
    const TensorView& q = w.layers[1].down_proj;
    const TensorView& d = (*dense)->weights().layers[1].down_proj;
    for (int64_t i = 0; i < q.numel(); ++i) {
      const float want = ValueAt(d, i), scale = q.row_scale[i / q.cols()];
      const double tolerance = target == DType::kI8 ? scale / 2 * 1.001 : std::abs(want) / 16 + scale * 0x1p-10;
      ASSERT_NEAR(ValueAt(q, i), want, tolerance) << name << " element " << i;
    }
  }
}

TEST_F(QuantizedCheckpointTest, PerTensorScaleIsBroadcast) {
  const std::string dir = WriteQuantized("tensor", DType::kI8);
  Edit(dir, [](const std::string& name, Tensor& t) {
    if (name.ends_with(".weight_scale")) {
      const float scale = 0.01f;
      t.shape = {1};
      t.bytes.assign(reinterpret_cast<const uint8_t*>(&scale), reinterpret_cast<const uint8_t*>(&scale) + 4);
    }
    return true;
  });
  Json config = Json::parse(std::ifstream(dir + "/config.json"));
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  std::ofstream(dir + "/config.json") << config.dump();
  auto loaded = Checkpoint::Load(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const TensorView& q = (*loaded)->weights().layers[0].q_proj;
  for (int64_t r = 0; r < q.rows(); ++r) EXPECT_EQ(q.row_scale[r], 0.01f);
}

TEST_F(QuantizedCheckpointTest, BadScalesAndDTypesAreNamed) {
  const std::string scale = "model.layers.1.mlp.up_proj.weight_scale";
  const std::string weight = "model.layers.1.mlp.up_proj.weight";
  ExpectNamedLoadErrors(DType::kF8E4M3, {
      {[&](const std::string& n, Tensor&) { return n != scale; }, {"missing tensor " + scale}},
      {[&](const std::string& n, Tensor& t) {
         if (n == scale) t.shape = {t.shape[0] / 2, 2};
         return true;
       },
       {scale, "expected [128, 1]"}},
      {[&](const std::string& n, Tensor& t) {
         if (n == scale) {
           const float bad = -1.0f;
           std::memcpy(t.bytes.data() + 8, &bad, 4);
         }
         return true;
       },
       {scale + "[2]", "finite and not negative"}},
      {[&](const std::string& n, Tensor& t) {
         if (n == scale) t.dtype = "I8", t.bytes.resize(128);
         return true;
       },
       {scale, "is i8; scales must be f32, bf16 or f16"}},
      {[&](const std::string& n, Tensor& t) {
         if (n == weight) t.dtype = "I8";
         return true;
       },
       {weight, "is i8 but quantization_config says f8_e4m3"}},
      {[&](const std::string& n, Tensor& t) {
         if (n == "lm_head.weight") t.dtype = "F8_E4M3", t.bytes.resize(t.bytes.size() / 2);
         return true;
       },
       {"lm_head.weight", "does not quantize it"}},
  });
}

// int8 is written as pack-quantized (vLLM's W8A16 layout): I32 words of
// q + 128 bytes and the shape, each malformation named; the plain
// int-quantized layout (one I8 weight per module) loads to the same weights.
TEST_F(QuantizedCheckpointTest, PackedInt8LayoutAndItsErrors) {
  const std::string dir = WriteQuantized("packed", DType::kI8);
  auto files = ShardedSafetensors::OpenDirectory(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::string module = "model.layers.1.mlp.up_proj";
  EXPECT_FALSE(files->Contains(module + ".weight"));
  auto packed = files->GetRaw(module + ".weight_packed");
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->entry->dtype_name, "I32");
  auto loaded = Checkpoint::Load(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const TensorView& up = (*loaded)->weights().layers[1].up_proj;
  EXPECT_EQ(packed->entry->shape, (std::vector<int64_t>{up.rows(), up.cols() / 4}));
  // Word 0 holds weights 0..3 from its low byte up, each as q + 128.
  uint32_t word0;
  std::memcpy(&word0, packed->data, 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(static_cast<int>((word0 >> (8 * i)) & 0xFF) - 128, std::lround(ValueAt(up, i) / up.row_scale[0])) << i;
  }
  files = absl::NotFoundError("closed");

  // The same checkpoint in the plain layout loads to the same values.
  const std::string plain = WriteQuantized("plain", DType::kI8);
  Edit(plain, [](const std::string& name, Tensor& t) {
    if (name.ends_with(".weight_shape")) return false;
    if (name.ends_with(".weight_packed")) {  // <module>.weight, I8 [rows, cols], q itself
      t.name = name.substr(0, name.size() - std::string("_packed").size());
      t.dtype = "I8";
      t.shape[1] *= 4;
      for (uint8_t& b : t.bytes) b ^= 0x80;
    }
    return true;
  });
  Json config = Json::parse(std::ifstream(plain + "/config.json"));
  config["quantization_config"]["format"] = "int-quantized";
  std::ofstream(plain + "/config.json") << config.dump();
  auto plain_loaded = Checkpoint::Load(plain, {});
  ASSERT_TRUE(plain_loaded.ok()) << plain_loaded.status();
  const TensorView& plain_up = (*plain_loaded)->weights().layers[1].up_proj;
  EXPECT_EQ(plain_up.byte_xor, 0);
  for (int64_t i = 0; i < up.numel(); ++i) ASSERT_EQ(ValueAt(plain_up, i), ValueAt(up, i)) << i;

  const std::string packed_name = module + ".weight_packed", shape_name = module + ".weight_shape";
  ExpectNamedLoadErrors(DType::kI8, {
      {[&](const std::string& n, Tensor&) { return n != packed_name; }, {"missing tensor " + packed_name}},
      {[&](const std::string& n, Tensor& t) {
         if (n == packed_name) t.dtype = "I8", t.shape[1] *= 4;
         return true;
       },
       {packed_name, "is I8", "expected I32 [128, 16]"}},
      {[&](const std::string& n, Tensor& t) {
         if (n == shape_name) t.bytes[0] ^= 1;
         return true;
       },
       {shape_name, "must hold [128, 64]"}},
  });
}

TEST_F(QuantizedCheckpointTest, KeepDenseModulesStayDenseAndAreIgnored) {
  const std::vector<std::string> keep = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                                         "model.layers.0.self_attn.v_proj", "model.layers.1.mlp.down_proj"};
  const std::string dir = WriteQuantized("keep", DType::kF8E4M3, keep);
  auto loaded = Checkpoint::Load(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<std::string> ignore = {"lm_head"};
  ignore.insert(ignore.end(), keep.begin(), keep.end());
  EXPECT_EQ((*loaded)->config().quantization.ignore, ignore);
  const ModelWeights& w = (*loaded)->weights();
  for (const TensorView* t : {&w.layers[0].q_proj, &w.layers[0].k_proj, &w.layers[0].v_proj, &w.layers[1].down_proj}) {
    EXPECT_EQ(t->dtype, DType::kBF16);
    EXPECT_EQ(t->row_scale, nullptr);
  }
  for (const TensorView* t : {&w.layers[0].o_proj, &w.layers[0].down_proj, &w.layers[1].q_proj}) {
    EXPECT_EQ(t->dtype, DType::kF8E4M3);
  }
  // The kept modules are the dense checkpoint's bytes.
  auto dense = Checkpoint::Load(Path("keep-dense"), {});
  ASSERT_TRUE(dense.ok()) << dense.status();
  const TensorView& kept = w.layers[1].down_proj;
  EXPECT_EQ(std::memcmp(kept.data, (*dense)->weights().layers[1].down_proj.data, kept.bytes()), 0);
  // The tokenizer and generation files come along.
  EXPECT_TRUE(std::filesystem::exists(dir + "/generation_config.json"));
}

TEST_F(QuantizedCheckpointTest, KeepDenseNamesMustBeLinearModules) {
  CheckpointSpec spec;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, Path("src")).ok());
  for (const std::string bad : {"model.layers.9.mlp.down_proj", "lm_head", "model.embed_tokens",
                                "model.layers.0.input_layernorm", "model.layers.0.mlp.down_proj.weight"}) {
    const absl::Status s = QuantizeCheckpoint(Path("src"), Path("out"), DType::kI8, {bad});
    EXPECT_THAT(std::string(s.message()), HasSubstr(bad + " is not a quantizable Linear module")) << bad;
  }
  EXPECT_THAT(std::string(QuantizeCheckpoint(Path("src"), Path("src"), DType::kI8).message()),
              HasSubstr("is the source folder"));
  // Other files come along, weights in other formats do not.
  std::ofstream(Path("src") + "/chat_template.jinja") << "{{ messages }}";
  std::ofstream(Path("src") + "/pytorch_model.bin") << "dense weights";
  ASSERT_TRUE(QuantizeCheckpoint(Path("src"), Path("copied"), DType::kF8E4M3).ok());
  EXPECT_TRUE(std::filesystem::exists(Path("copied") + "/chat_template.jinja"));
  EXPECT_FALSE(std::filesystem::exists(Path("copied") + "/pytorch_model.bin"));
}

TEST_F(QuantizedCheckpointTest, WeightDTypeNamesWhatWasLoaded) {
  const std::string dir = WriteQuantized("named", DType::kI8);
  auto loaded = Checkpoint::Load(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->weight_dtype(), DType::kI8);
  // A dummy load generates dense weights, and its config says so.
  LoadOptions dummy;
  dummy.format = LoadFormat::kDummy;
  auto generated = Checkpoint::Load(dir, dummy);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ((*generated)->weight_dtype(), DType::kBF16);
  EXPECT_FALSE((*generated)->config().quantization.enabled);
  EXPECT_EQ((*generated)->weights().layers[0].q_proj.dtype, DType::kBF16);
}

TEST_F(QuantizedCheckpointTest, QuantizingTwiceIsRefused) {
  const std::string dir = WriteQuantized("once", DType::kI8);
  const absl::Status s = QuantizeCheckpoint(dir, Path("twice"), DType::kF8E4M3);
  EXPECT_THAT(std::string(s.message()), HasSubstr("already quantized"));
}

}  // namespace
}  // namespace floe
