// LstmSpeculator against tests/.../reference_speculator.py: a PyTorch module
// written from ArcticTraining's definition saves a random checkpoint in the
// real format (pytorch_model.bin), scripts/convert_speculator.py turns it
// into safetensors, and Floe's drafts and per-step states must match the
// reference's (tokens exactly; states within float tolerance).
#include "services/worker/speculation/lstm_speculator.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace floe {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::string SourceDir() {
  const char* src = std::getenv("FLOE_SOURCE_DIR");
  return src ? src : ".";
}

template <typename T>
std::vector<T> ReadVector(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

struct Case {
  const char* name;
  const char* args;  // reference_speculator.py flags
  float tolerance;   // max |state - reference|
};

class SpeculatorReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculatorReferenceTest, DraftsAndStatesMatchPyTorch) {
  const Case& c = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = ::testing::TempDir() + "/speculator_" + c.name;
  std::filesystem::remove_all(dir);
  const std::string make = std::string(kPython) + " " + SourceDir() +
                           "/tests/services/worker/speculation/reference_speculator.py " + dir + " " + c.args;
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  const std::string convert = std::string(kPython) + " " + SourceDir() + "/scripts/convert_speculator.py " + dir;
  ASSERT_EQ(std::system(convert.c_str()), 0) << convert;

  auto speculator = LstmSpeculator::Load(dir, 2);
  ASSERT_TRUE(speculator.ok()) << speculator.status();
  std::ifstream meta_file(dir + "/meta.json");
  const nlohmann::json meta = nlohmann::json::parse(meta_file);
  const int batch = meta["batch"], steps = meta["steps"], state_dim = meta["state_dim"];
  ASSERT_EQ((*speculator)->config().state_dim(), state_dim);
  const std::vector<float> hidden = ReadVector<float>(dir + "/inputs_hidden.f32");
  const std::vector<int32_t> tokens = ReadVector<int32_t>(dir + "/inputs_tokens.i32");
  const std::vector<int32_t> expected = ReadVector<int32_t>(dir + "/expected_tokens.i32");
  const std::vector<float> expected_states = ReadVector<float>(dir + "/expected_states.f32");
  ASSERT_EQ(tokens.size(), static_cast<size_t>(batch));

  std::vector<int32_t> drafts(batch * steps);
  std::vector<std::vector<float>> states;
  (*speculator)->Draft(hidden, tokens, steps, drafts, &states);
  EXPECT_EQ(drafts, expected);
  ASSERT_EQ(states.size(), static_cast<size_t>(steps));
  float worst = 0.0f;
  for (int k = 0; k < steps; ++k) {
    ASSERT_EQ(states[k].size(), static_cast<size_t>(batch * state_dim));
    for (int i = 0; i < batch * state_dim; ++i)
      worst = std::max(worst, std::abs(states[k][i] - expected_states[static_cast<size_t>(k) * batch * state_dim + i]));
  }
  EXPECT_LE(worst, c.tolerance);
  RecordProperty("max_state_diff", std::to_string(worst));

  // A row drafts the same alone as in the batch, and fewer steps are a prefix.
  const int64_t hidden_size = (*speculator)->config().input_hidden_dim;
  for (int r = 0; r < batch; r += 3) {
    std::vector<int32_t> alone(steps);
    (*speculator)->Draft(std::span<const float>(hidden).subspan(r * hidden_size, hidden_size),
                         std::span<const int32_t>(tokens).subspan(r, 1), steps, alone);
    EXPECT_EQ(alone, std::vector<int32_t>(drafts.begin() + r * steps, drafts.begin() + (r + 1) * steps)) << r;
    std::vector<int32_t> shorter(1);
    (*speculator)->Draft(std::span<const float>(hidden).subspan(r * hidden_size, hidden_size),
                         std::span<const int32_t>(tokens).subspan(r, 1), 1, shorter);
    EXPECT_EQ(shorter[0], drafts[r * steps]) << r;
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Methods, SpeculatorReferenceTest,
    ::testing::Values(
        Case{"lstm_tied", "--method sum_lstm --tie-weights --tie-lstm-embs --scale-input", 2e-5f},
        Case{"lstm_untied_embs", "--method sum_lstm --tie-weights --n-predict 4 --seed 2", 2e-5f},
        Case{"lstm_bf16", "--method sum_lstm --tie-weights --tie-lstm-embs --scale-input --dtype bf16 --seed 3", 2e-4f},
        Case{"rnn_tied", "--method sum_rnn --tie-weights --scale-input --seed 4", 2e-5f},
        Case{"rnn_untied", "--method sum_rnn --n-predict 4 --seed 5", 2e-5f},
        Case{"rnn_stacked", "--method sum_rnn --inner 48.32 --proj 48.48 --emb 48.48 --seed 6", 2e-5f},
        Case{"rnn_bf16", "--method sum_rnn --tie-weights --dtype bf16 --seed 7", 2e-4f}),
    [](const auto& info) { return std::string(info.param.name); });

// Writes a config.json (and, when given, tensors) into a fresh folder.
std::string WriteConfig(const std::string& name, const nlohmann::json& config) {
  const std::string dir = ::testing::TempDir() + "/speculator_bad_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config.dump();
  return dir;
}

nlohmann::json GoodConfig() {
  return {{"model_type", "mlp_speculator"}, {"method", "sum_lstm"}, {"n_predict", 3},   {"input_hidden_dim", 64},
          {"vocab_size", 512},              {"inner_dim", "48"},    {"emb_dim", "48"},  {"proj_dim", "48"},
          {"tie_weights", true},            {"tie_lstm_embs", true}, {"scale_input", true}};
}

TEST(SpeculatorConfigTest, ErrorsNameTheField) {
  struct Bad {
    const char* field;
    nlohmann::json value;
    const char* message;
  };
  for (const Bad& bad : {Bad{"model_type", "llama", "model_type"}, Bad{"method", "sum_gru", "method"},
                         Bad{"method", 1, "method"}, Bad{"model_type", nullptr, "model_type"},
                         Bad{"n_predict", 0, "n_predict"}, Bad{"n_predict", 99, "n_predict"},
                         Bad{"inner_dim", "48.x", "inner_dim"}, Bad{"emb_dim", -3, "emb_dim"},
                         Bad{"tie_weights", false, "tie_weights"}, Bad{"proj_dim", "32", "emb_dim == proj_dim"},
                         Bad{"scale_input", "yes", "scale_input"}}) {
    nlohmann::json config = GoodConfig();
    config[bad.field] = bad.value;
    auto parsed = SpeculatorConfig::FromJson(config.dump());
    ASSERT_FALSE(parsed.ok()) << bad.field;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(bad.message), std::string::npos) << parsed.status();
  }
  nlohmann::json missing = GoodConfig();
  missing.erase("vocab_size");
  EXPECT_NE(SpeculatorConfig::FromJson(missing.dump()).status().message().find("vocab_size"), std::string::npos);
  EXPECT_FALSE(SpeculatorConfig::FromJson("{not json").ok());
  // Dims as ArcticTraining writes them (strings), as integers, and as lists.
  nlohmann::json numeric = GoodConfig();
  numeric["inner_dim"] = 48;
  numeric["emb_dim"] = nlohmann::json::array({48});
  EXPECT_TRUE(SpeculatorConfig::FromJson(numeric.dump()).ok());
}

TEST(SpeculatorLoadTest, MissingOrMisshapenTensorsAreNamed) {
  ASSERT_TRUE(std::filesystem::exists(kPython));
  const std::string dir = ::testing::TempDir() + "/speculator_shapes";
  std::filesystem::remove_all(dir);
  const std::string make = std::string(kPython) + " " + SourceDir() +
                           "/tests/services/worker/speculation/reference_speculator.py " + dir +
                           " --method sum_lstm --tie-weights --tie-lstm-embs";
  ASSERT_EQ(std::system(make.c_str()), 0);
  // No safetensors yet: the error points at the converter.
  auto unconverted = LstmSpeculator::Load(dir, 1);
  ASSERT_FALSE(unconverted.ok());
  EXPECT_NE(unconverted.status().message().find("convert_speculator.py"), std::string::npos) << unconverted.status();
  ASSERT_EQ(std::system((std::string(kPython) + " " + SourceDir() + "/scripts/convert_speculator.py " + dir).c_str()),
            0);
  // A config that does not fit the weights: the tensor and both shapes are named.
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["input_hidden_dim"] = 80;
  std::ofstream(dir + "/config.json") << config.dump();
  auto misshapen = LstmSpeculator::Load(dir, 1);
  ASSERT_FALSE(misshapen.ok());
  EXPECT_NE(misshapen.status().message().find("forget_proj.0.weight"), std::string::npos) << misshapen.status();
  EXPECT_NE(misshapen.status().message().find("[48, 80]"), std::string::npos) << misshapen.status();
  config["input_hidden_dim"] = 64;
  config["method"] = "sum_rnn";  // other tensor names
  std::ofstream(dir + "/config.json") << config.dump();
  auto missing = LstmSpeculator::Load(dir, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("emb.0.0.weight"), std::string::npos) << missing.status();
  config["method"] = "sum_lstm";
  std::ofstream(dir + "/config.json") << config.dump();
  auto good = LstmSpeculator::Load(dir, 1);
  ASSERT_TRUE(good.ok()) << good.status();
  // The served model must match: both sides are named.
  EXPECT_TRUE((*good)->CheckFits(64, 512, "m").ok());
  const absl::Status wrong = (*good)->CheckFits(2048, 128256, "llama");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  for (const char* part : {"64", "512", "2048", "128256", "llama"})
    EXPECT_NE(wrong.message().find(part), std::string::npos) << wrong;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace floe
