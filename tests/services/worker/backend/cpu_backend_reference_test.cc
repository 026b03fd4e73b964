// The CPU backend against reference_llama.py, an independent PyTorch (f32)
// implementation of the HF forward pass, on tiny random models.
// Tolerances on the prompt logits (|logit| up to ~4) and on the final hidden
// states (the lm_head's input, the same arithmetic one matmul earlier):
// - f32 weights: max |diff| <= 2e-5. Both sides compute in f32, so only the
//   accumulation order differs (measured ~2e-6).
// - bf16 weights: both sides round every linear layer's input to bf16 (the
//   precision contract in kernels/cpu/matmul.h) and widen the weights
//   exactly, so most logits again differ only by accumulation order: the
//   median |diff| <= 2e-5 (measured ~5e-7). Where an input lies within that
//   noise of a bf16 rounding boundary the two sides round it apart, one bf16
//   ulp (2^-8 relative) on one element, which moves later values a little:
//   max |diff| <= 4e-3 x max |logit| (measured up to 1.8e-3 at max 4).
// The greedy continuation (prefill, then decode one token at a time through
// the paged cache with block size 4) must match exactly.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>

#include <unistd.h>

#include "gtest/gtest.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/checkpoint_writer.h"
#include "tests/services/worker/backend/test_model.h"

namespace floe {
namespace {

using testing_model::Flavor;
using testing_model::TestModel;

constexpr int kSteps = 64;
constexpr const char* kPython = "/usr/bin/python3";

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The backend's rows (one per prompt position) against the reference's
// [rows, width] f32 file, under the tolerances above.
void ExpectRowsMatchReference(const std::vector<std::vector<float>>& rows, const std::string& path, int width,
                              DType weights, const std::string& what) {
  std::vector<char> bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), rows.size() * width * sizeof(float)) << path;
  const float* ref = reinterpret_cast<const float*>(bytes.data());
  double max_abs = 0;
  std::vector<double> diffs;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), static_cast<size_t>(width)) << what << " row " << i;
    for (int v = 0; v < width; ++v) {
      diffs.push_back(std::abs(rows[i][v] - ref[i * width + v]));
      max_abs = std::max<double>(max_abs, std::abs(ref[i * width + v]));
    }
  }
  std::sort(diffs.begin(), diffs.end());
  const double max_diff = diffs.back(), median_diff = diffs[diffs.size() / 2];
  const double p99_diff = diffs[diffs.size() * 99 / 100];
  if (weights == DType::kBF16) {
    EXPECT_LE(median_diff, 2e-5) << what;
    EXPECT_LE(max_diff, 4e-3 * max_abs) << what << ", max |value| " << max_abs;
  } else {
    EXPECT_LE(max_diff, 2e-5) << what << ", max |value| " << max_abs;
  }
  std::cout << "|diff| of prompt " << what << ": median " << median_diff << ", p99 " << p99_diff << ", max "
            << max_diff << " (max |value| " << max_abs << ")\n";
}

// Runs reference_llama.py on `dir` (config.txt and weights already there)
// and checks the backend's prompt logits, final hidden states and greedy
// continuation against it.
void CompareWithReference(Backend& backend, const std::string& dir, int steps, DType weights) {
  const char* src = std::getenv("FLOE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "FLOE_SOURCE_DIR unset (run through ctest)";
  const int vocab = backend.config().vocab_size;
  std::vector<int32_t> prompt(13);
  std::mt19937 rng(5);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % vocab);
  {
    std::ofstream f(dir + "/prompt.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(prompt.data()), prompt.size() * 4);
  }
  const std::string cmd = std::string(kPython) + " " + src +
                          "/tests/services/worker/backend/reference_llama.py " + dir;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  const int block_size = 4, max_blocks = (13 + steps + 3) / 4;
  ASSERT_TRUE(backend.AllocateKvCache(max_blocks + 3, block_size).ok());
  auto gen = testing_model::Generate(backend, prompt, steps, /*chunk=*/0, block_size,
                                     /*first_block=*/3, max_blocks);

  ExpectRowsMatchReference(gen.prompt_logits, dir + "/prompt_logits.bin", vocab, weights, "logits");
  // The hidden states a model-based speculator reads (the lm_head's input).
  ExpectRowsMatchReference(gen.prompt_hidden, dir + "/prompt_hidden.bin", backend.config().hidden_size, weights,
                           "hidden states");

  std::vector<char> ref_greedy = ReadFile(dir + "/greedy.bin");
  ASSERT_EQ(ref_greedy.size(), steps * sizeof(int32_t));
  const int32_t* ref_tokens = reinterpret_cast<const int32_t*>(ref_greedy.data());
  std::vector<int32_t> expected(ref_tokens, ref_tokens + steps);
  EXPECT_EQ(gen.tokens, expected);
  std::set<int32_t> distinct(expected.begin(), expected.end());
  EXPECT_GE(distinct.size(), 3u) << "degenerate continuation: the test would prove little";
}

std::string TempDir(const std::string& tag) {
  const std::string dir = ::testing::TempDir() + "/floe_ref_" + tag + "_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

class ReferenceTest : public ::testing::TestWithParam<std::tuple<Flavor, DType>> {};

TEST_P(ReferenceTest, LogitsAndGreedyMatchPyTorch) {
  const auto [flavor, dtype] = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = TempDir(std::to_string(static_cast<int>(flavor)) + DTypeName(dtype).data());
  TestModel model(flavor, dtype, /*seed=*/11 + static_cast<int>(flavor));
  model.WriteReferenceFiles(dir, kSteps);
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  CompareWithReference(**backend, dir, kSteps, dtype);
  std::filesystem::remove_all(dir);
}

// A real checkpoint folder: the random-checkpoint writer's safetensors, loaded
// by Checkpoint::Load, and read independently by the script. The "tiny" preset
// has the full Llama 3 vocabulary (128256), so fewer steps.
class CheckpointReferenceTest
    : public ::testing::TestWithParam<std::tuple<const char*, DType>> {};

TEST_P(CheckpointReferenceTest, LoadedCheckpointMatchesPyTorch) {
  const auto [architecture, dtype] = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = TempDir(std::string("ckpt") + architecture + DTypeName(dtype).data());
  CheckpointSpec spec;
  spec.preset = "tiny";
  spec.architecture = architecture;
  spec.dtype = dtype;
  spec.seed = 7;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir).ok());
  auto checkpoint = Checkpoint::Load(dir, LoadOptions{});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  constexpr int kCheckpointSteps = 16;
  testing_model::WriteReferenceConfig((*checkpoint)->config(), dtype, kCheckpointSteps, dir);
  auto backend = CpuBackend::Create((*checkpoint)->config(), (*checkpoint)->weights(), {.num_threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  CompareWithReference(**backend, dir, kCheckpointSteps, dtype);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CheckpointReferenceTest,
                         ::testing::Values(std::make_tuple("", DType::kBF16),
                                           std::make_tuple("Qwen2ForCausalLM", DType::kF32)));

std::string CaseName(const ::testing::TestParamInfo<std::tuple<Flavor, DType>>& info) {
  static const char* const kNames[] = {"Llama3", "Qwen2", "Qwen3"};
  return std::string(kNames[static_cast<int>(std::get<0>(info.param))]) +
         (std::get<1>(info.param) == DType::kF32 ? "F32" : "Bf16");
}

INSTANTIATE_TEST_SUITE_P(
    Flavors, ReferenceTest,
    ::testing::Combine(::testing::Values(Flavor::kLlama3, Flavor::kQwen2, Flavor::kQwen3),
                       ::testing::Values(DType::kF32, DType::kBF16)),
    CaseName);

}  // namespace
}  // namespace floe
