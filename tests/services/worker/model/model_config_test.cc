#include "services/worker/model/model_config.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/checkpoint_writer.h"
#include "tests/services/worker/model/test_util.h"

namespace floe {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// The real meta-llama/Llama-3.2-1B-Instruct config.json.
constexpr char kLlama32Config[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

Json Minimal() {
  return Json::parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 1000,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "max_position_embeddings": 2048})");
}

std::string ErrorOf(const Json& config) {
  auto parsed = ModelConfig::FromJson(config.dump());
  EXPECT_FALSE(parsed.ok());
  return std::string(parsed.status().message());
}

TEST(ModelConfigTest, ParsesLlama32) {
  auto c = ModelConfig::FromJson(kLlama32Config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->intermediate_size, 8192);
  EXPECT_EQ(c->num_layers, 16);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c->rope_scaling.factor, 32.0f);
  EXPECT_FLOAT_EQ(c->rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c->rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(c->torch_dtype, "bfloat16");
}

TEST(ModelConfigTest, Defaults) {
  auto c = ModelConfig::FromJson(Minimal().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_EQ(c->rope_scaling.type, "");
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
  Json j = Minimal();
  j["num_key_value_heads"] = nullptr;  // null means default, as HF writes it
  j["rope_scaling"] = nullptr;
  j["eos_token_id"] = 2;
  c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{2});
}

TEST(ModelConfigTest, Qwen2HasAttentionBias) {
  Json j = Minimal();
  j["architectures"] = {"Qwen2ForCausalLM"};
  auto c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen2);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
}

TEST(ModelConfigTest, Qwen3HasQkNormAndExplicitHeadDim) {
  Json j = Minimal();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 32;  // heads*head_dim (128) != hidden (64), as in real Qwen3 models
  j["num_key_value_heads"] = 2;
  auto c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 32);
}

TEST(ModelConfigTest, MistralParses) {
  Json j = Minimal();
  j["architectures"] = {"MistralForCausalLM"};
  auto c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMistral);
}

TEST(ModelConfigTest, RopeScalingLinearAndLegacyTypeKey) {
  Json j = Minimal();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, "linear");
  EXPECT_FLOAT_EQ(c->rope_scaling.factor, 2.0f);
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("rope_scaling.low_freq_factor"));
}

TEST(ModelConfigTest, UnsupportedRopeType) {
  Json j = Minimal();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  std::string error = ErrorOf(j);
  EXPECT_THAT(error, HasSubstr("rope_scaling"));
  EXPECT_THAT(error, HasSubstr("yarn"));
}

TEST(ModelConfigTest, UnsupportedArchitectureListsSupported) {
  Json j = Minimal();
  j["architectures"] = {"GPT2LMHeadModel"};
  std::string error = ErrorOf(j);
  EXPECT_THAT(error, HasSubstr("GPT2LMHeadModel"));
  for (const char* name : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                           "Qwen3ForCausalLM"}) {
    EXPECT_THAT(error, HasSubstr(name));
  }
}

TEST(ModelConfigTest, HiddenNotDivisibleByHeads) {
  Json j = Minimal();
  j["num_attention_heads"] = 5;
  j["num_key_value_heads"] = 5;
  EXPECT_THAT(ErrorOf(j), HasSubstr("hidden_size 64 is not divisible by num_attention_heads 5"));
}

TEST(ModelConfigTest, HeadsNotDivisibleByKvHeads) {
  Json j = Minimal();
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(ErrorOf(j), HasSubstr("num_key_value_heads"));
}

TEST(ModelConfigTest, MissingRequiredFieldIsNamed) {
  for (const char* field : {"architectures", "vocab_size", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads", "max_position_embeddings"}) {
    Json j = Minimal();
    j.erase(field);
    std::string error = ErrorOf(j);
    EXPECT_THAT(error, HasSubstr(field));
    EXPECT_THAT(error, HasSubstr("missing"));
  }
}

TEST(ModelConfigTest, WrongTypesAreNamed) {
  Json j = Minimal();
  j["hidden_size"] = "64";
  EXPECT_THAT(ErrorOf(j), HasSubstr("hidden_size"));
  j = Minimal();
  j["tie_word_embeddings"] = 1;
  EXPECT_THAT(ErrorOf(j), HasSubstr("tie_word_embeddings"));
  j = Minimal();
  j["eos_token_id"] = {1, "x"};
  EXPECT_THAT(ErrorOf(j), HasSubstr("eos_token_id"));
  j = Minimal();
  j["attention_bias"] = true;  // Llama would need an o_proj bias too
  EXPECT_THAT(ErrorOf(j), HasSubstr("attention_bias"));
  EXPECT_THAT(std::string(ModelConfig::FromJson("{not json").status().message()),
              HasSubstr("not valid JSON"));
}

TEST(ModelConfigTest, ToJsonRoundTripsPresets) {
  for (const std::string& preset : CheckpointPresetNames()) {
    for (const char* arch : {"", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
      if (preset.ends_with("-swiftkv") && *arch) {  // a SwiftKV preset is its own architecture
        EXPECT_FALSE(PresetConfig(preset, arch).ok());
        continue;
      }
      auto config = PresetConfig(preset, arch);
      ASSERT_TRUE(config.ok()) << config.status();
      std::string text = config->ToJson();
      EXPECT_THAT(text, HasSubstr("\"rms_norm_eps\": 1e-05"));
      auto back = ModelConfig::FromJson(text);
      ASSERT_TRUE(back.ok()) << back.status() << text;
      EXPECT_EQ(back->ToJson(), text);
      EXPECT_EQ(back->architecture, config->architecture);
      EXPECT_EQ(back->attention_bias, config->attention_bias);
      EXPECT_EQ(back->qk_norm, config->qk_norm);
      EXPECT_EQ(back->head_dim, config->head_dim);
      EXPECT_EQ(back->eos_token_ids, config->eos_token_ids);
      EXPECT_EQ(back->rope_scaling.original_max_position_embeddings, 8192);
      EXPECT_EQ(back->swiftkv, config->swiftkv);
      EXPECT_EQ(back->num_key_value_layers, config->num_key_value_layers);
      EXPECT_EQ(back->swiftkv, preset.ends_with("-swiftkv"));
    }
  }
  EXPECT_THAT(std::string(PresetConfig("huge").status().message()), HasSubstr("huge"));
  EXPECT_THAT(std::string(PresetConfig("tiny", "BertModel").status().message()),
              HasSubstr("BertModel"));
}

// Arctic's LlamaSwiftKVConfig fields, as the public SwiftKV checkpoints write them.
TEST(ModelConfigTest, ParsesLlamaSwiftKV) {
  Json j = Minimal();
  j["architectures"] = {"LlamaSwiftKVForCausalLM"};
  j["model_type"] = "llama_swiftkv";
  j["num_hidden_layers"] = 32;
  j["swiftkv"] = true;
  j["num_key_value_layers"] = 16;
  j["key_value_group_size"] = 1;
  auto c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlamaSwiftKV);
  EXPECT_TRUE(c->swiftkv);
  EXPECT_EQ(c->num_key_value_layers, 16);
  EXPECT_EQ(c->dense_layers(), 16);
  auto back = ModelConfig::FromJson(c->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), c->ToJson());
  EXPECT_TRUE(back->swiftkv);

  // swiftkv defaults to off (HF's default), num_key_value_layers to every layer.
  j.erase("swiftkv");
  j.erase("num_key_value_layers");
  c = ModelConfig::FromJson(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->swiftkv);
  EXPECT_EQ(c->dense_layers(), 32);

  j["num_key_value_layers"] = 33;
  EXPECT_THAT(ErrorOf(j), HasSubstr("num_key_value_layers: 33 exceeds num_hidden_layers 32"));
  j["num_key_value_layers"] = 0;
  EXPECT_THAT(ErrorOf(j), HasSubstr("num_key_value_layers"));
  j["num_key_value_layers"] = 16;
  j["key_value_group_size"] = 2;
  EXPECT_THAT(ErrorOf(j), HasSubstr("key_value_group_size: 2 is not supported"));

  // On another architecture the SwiftKV fields are an error, not ignored.
  Json llama = Minimal();
  llama["swiftkv"] = true;
  EXPECT_THAT(ErrorOf(llama), HasSubstr("swiftkv: is a SwiftKV field"));
}

class ModelConfigFileTest : public TempDirTest {};

TEST_F(ModelConfigFileTest, FromFileNamesThePath) {
  Json j = Minimal();
  j.erase("vocab_size");
  std::ofstream(Path("config.json")) << j.dump();
  auto c = ModelConfig::FromFile(Path("config.json"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(Path("config.json")));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("vocab_size"));
  EXPECT_EQ(ModelConfig::FromFile(Path("absent.json")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace floe
