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
// - i8 and f8_e4m3 weights (compressed-tensors checkpoints, which the script
//   decodes from their bits with NumPy): as bf16. The backend computes
//   scale * sum(bf16(x) * q), the script sum(bf16(x) * (q * scale)), which
//   differ by f32 rounding only, so the bf16 tolerances hold.
// The greedy continuation (prefill, then decode one token at a time through
// the paged cache with block size 4) must match exactly.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/matmul.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/model/quantize.h"
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
  if (weights != DType::kF32) {
    EXPECT_LE(median_diff, 2e-5) << what;
    EXPECT_LE(max_diff, 4e-3 * max_abs) << what << ", max |value| " << max_abs;
  } else {
    EXPECT_LE(max_diff, 2e-5) << what << ", max |value| " << max_abs;
  }
  std::cout << "|diff| of prompt " << what << ": median " << median_diff << ", p99 " << p99_diff << ", max "
            << max_diff << " (max |value| " << max_abs << ")\n";
}

// Top-2 margin of a logits row.
double Margin(const std::vector<float>& v) {
  std::vector<float> s = v;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  return s[0] - s[1];
}

// The greedy continuation equals the reference's. With bf16 weights the
// logits may differ by the tolerance above (one bf16 rounding apart), so a
// token may flip where the backend's top two logits are within it of each
// other (a near tie); past a flip the contexts differ and the comparison
// stops. With f32 weights every token must match.
void ExpectSameGreedy(const testing_model::Generation& gen, const std::vector<int32_t>& expected, DType weights) {
  ASSERT_EQ(gen.tokens.size(), expected.size());
  for (size_t t = 0; t < expected.size(); ++t) {
    if (gen.tokens[t] == expected[t]) continue;
    const std::vector<float>& logits = gen.step_logits[t];
    double max_abs = 0;
    for (float x : logits) max_abs = std::max<double>(max_abs, std::abs(x));
    const double margin = Margin(logits);
    std::cout << "greedy flip at step " << t << ": top-2 margin " << margin << " (max |logit| " << max_abs << ")\n";
    EXPECT_NE(weights, DType::kF32) << "f32 greedy differs at step " << t;
    EXPECT_LT(margin, 2 * 4e-3 * max_abs) << "a flip at step " << t << " away from a near tie";
    return;
  }
}

// Writes a 13-token prompt to `dir` and runs reference_llama.py there
// (config.txt and weights already written); returns the prompt.
std::vector<int32_t> RunReference(const std::string& dir, int vocab) {
  std::vector<int32_t> prompt(13);
  std::mt19937 rng(5);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % vocab);
  {
    std::ofstream f(dir + "/prompt.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(prompt.data()), prompt.size() * 4);
  }
  const char* src = std::getenv("FLOE_SOURCE_DIR");
  EXPECT_NE(src, nullptr) << "FLOE_SOURCE_DIR unset (run through ctest)";
  const std::string cmd = std::string(kPython) + " " + (src ? src : ".") +
                          "/tests/services/worker/backend/reference_llama.py " + dir;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return prompt;
}

std::vector<int32_t> ReferenceGreedy(const std::string& dir, int steps) {
  std::vector<char> bytes = ReadFile(dir + "/greedy.bin");
  EXPECT_EQ(bytes.size(), steps * sizeof(int32_t));
  const int32_t* tokens = reinterpret_cast<const int32_t*>(bytes.data());
  return std::vector<int32_t>(tokens, tokens + bytes.size() / sizeof(int32_t));
}

// Runs reference_llama.py on `dir` (config.txt and weights already there)
// and checks the backend's prompt logits, final hidden states and greedy
// continuation against it.
void CompareWithReference(Backend& backend, const std::string& dir, int steps, DType weights) {
  const int vocab = backend.config().vocab_size;
  const std::vector<int32_t> prompt = RunReference(dir, vocab);
  ASSERT_FALSE(::testing::Test::HasFailure());

  const int block_size = 4, max_blocks = (13 + steps + 3) / 4;
  ASSERT_TRUE(backend.AllocateKvCache(max_blocks + 3, block_size).ok());
  auto gen = testing_model::Generate(backend, prompt, steps, /*chunk=*/0, block_size,
                                     /*first_block=*/3, max_blocks);

  ExpectRowsMatchReference(gen.prompt_logits, dir + "/prompt_logits.bin", vocab, weights, "logits");
  // The hidden states a model-based speculator reads (the lm_head's input).
  ExpectRowsMatchReference(gen.prompt_hidden, dir + "/prompt_hidden.bin", backend.config().hidden_size, weights,
                           "hidden states");

  const std::vector<int32_t> expected = ReferenceGreedy(dir, steps);
  ExpectSameGreedy(gen, expected, weights);
  std::set<int32_t> distinct(expected.begin(), expected.end());
  EXPECT_GE(distinct.size(), 3u) << "degenerate continuation: the test would prove little";
}

std::string TempDir(const std::string& tag) {
  const std::string dir = ::testing::TempDir() + "/floe_ref_" + tag + "_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

template <typename T>
void WriteFile(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The 8-bit path against reference_quantized.py (NumPy, from the formats'
// definitions): the e4m3 codec over every code and over values at and
// between code boundaries, and one quantized linear layer (odd k, rows not a
// multiple of the panel width) through the matmul kernels.
class QuantizedLinearTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizedLinearTest, MatchesNumPy) {
  const DType dtype = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh";
  const std::string dir = TempDir(std::string("qlinear") + DTypeName(dtype).data());
  std::vector<float> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
  std::vector<float> enc_in;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int c = 0; c < 0x7e; ++c) {  // each code, the midpoint to the next, and just either side of it
    const float a = codes[c], mid = (codes[c] + codes[c + 1]) / 2;
    for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      enc_in.push_back(v);
      enc_in.push_back(-v);
    }
  }
  for (float v : {448.0f, 464.0f, 500.0f, 1e6f, 1e-12f, 0.0f, -0.0f}) enc_in.push_back(v);
  for (int i = 0; i < 2000; ++i) enc_in.push_back(normal(rng) * std::exp2(static_cast<float>(i % 24) - 12));
  std::vector<uint8_t> enc_out(enc_in.size());
  for (size_t i = 0; i < enc_in.size(); ++i) enc_out[i] = F32ToF8E4M3(enc_in[i]);

  const int64_t m = 37, n = 300, k = 1001;
  std::vector<float> wf(n * k), x(m * k);
  for (float& v : wf) v = normal(rng) * 0.05f;
  for (float& v : x) v = normal(rng);
  const TensorView dense{DType::kF32, {n, k}, wf.data()};
  auto quantized = QuantizePerChannel(dense, dtype);
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  const QuantizedMatrix& q = *quantized;
  cpu::ThreadPool pool(2);
  const TensorView view = q.View();
  const cpu::PackedMatrix packed = cpu::PackMatrix({&view, 1}, pool);
  std::vector<float> y(m * n);
  cpu::Matmul(x.data(), m, packed, y.data(), pool);

  WriteFile(dir + "/codes.bin", codes);
  WriteFile(dir + "/enc_in.bin", enc_in);
  WriteFile(dir + "/enc_out.bin", enc_out);
  std::ofstream(dir + "/meta.txt") << m << " " << n << " " << k << " " << (dtype == DType::kI8 ? "I8" : "F8_E4M3");
  WriteFile(dir + "/q.bin", q.data);
  WriteFile(dir + "/scale.bin", q.scales);
  WriteFile(dir + "/x.bin", x);
  WriteFile(dir + "/y.bin", y);
  const char* src = std::getenv("FLOE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "FLOE_SOURCE_DIR unset (run through ctest)";
  const std::string cmd = std::string(kPython) + " " + src +
                          "/tests/services/worker/backend/reference_quantized.py " + dir;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizedLinearTest, ::testing::Values(DType::kI8, DType::kF8E4M3),
                         [](const auto& info) { return std::string(info.param == DType::kI8 ? "Int8" : "Fp8"); });

class ReferenceTest : public ::testing::TestWithParam<std::tuple<Flavor, DType>> {};

TEST_P(ReferenceTest, LogitsAndGreedyMatchPyTorch) {
  const auto [flavor, dtype] = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = TempDir(std::to_string(static_cast<int>(flavor)) + DTypeName(dtype).data());
  // SwiftKV: 4 layers, the last 2 skipped by prompt rows (here every prompt
  // row wants logits, so every row runs them: the narrowing is checked below).
  TestModel model(flavor, dtype, /*seed=*/11 + static_cast<int>(flavor), /*vocab=*/512,
                  /*layers=*/flavor == Flavor::kSwiftKV ? 4 : 2);
  model.WriteReferenceFiles(dir, kSteps);
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  CompareWithReference(**backend, dir, kSteps, dtype);
  std::filesystem::remove_all(dir);
}

// Max over rows of |want - got| / max |want| of the row.
double WorstRelative(const std::vector<std::vector<float>>& want, const std::vector<std::vector<float>>& got) {
  double worst = 0;
  for (size_t p = 0; p < want.size(); ++p) {
    double max_abs = 0;
    for (float x : want[p]) max_abs = std::max<double>(max_abs, std::abs(x));
    for (size_t i = 0; i < want[p].size(); ++i)
      worst = std::max(worst, std::abs(want[p][i] - got[p][i]) / max_abs);
  }
  return worst;
}

// Greedy tokens of `got` equal `want`'s up to a first flip, which may only
// come where want's top-2 margin is within twice `bound` x max |logit| (a
// near tie: past it the contexts differ and the comparison stops). Returns
// the steps that agreed.
size_t ExpectFlipOnlyNearATie(const testing_model::Generation& want, const testing_model::Generation& got,
                              double bound, const std::string& what) {
  size_t same = 0;
  for (; same < want.tokens.size() && want.tokens[same] == got.tokens[same]; ++same) {
  }
  if (same < want.tokens.size()) {
    double max_abs = 0;
    for (float x : want.step_logits[same]) max_abs = std::max<double>(max_abs, std::abs(x));
    const double margin = Margin(want.step_logits[same]);
    EXPECT_LT(margin, 2 * bound * max_abs) << what << ": a flip at step " << same << " away from a near tie";
    std::cout << what << ": greedy flip at step " << same << ", top-2 margin " << margin << "\n";
  }
  return same;
}

// A bf16 KV cache (--kv-cache-dtype bf16):
// - against the PyTorch reference with K (after RoPE) and V rounded to bf16
//   the same way: the bf16 tolerances above hold for f32 and bf16 weights
//   (a K or V within f32 noise of a bf16 rounding boundary may round one ulp
//   apart, as a linear input may);
// - against the same backend with an f32 cache: prompt logits within
//   kKvBf16Bound x max |logit|, and the greedy tokens equal up to a first
//   flip, which may only come where the f32 cache's top-2 margin is within
//   twice that bound (checked at the flip).
constexpr double kKvBf16Bound = 2e-2;

class Bf16KvReferenceTest : public ::testing::TestWithParam<std::tuple<Flavor, DType>> {};

TEST_P(Bf16KvReferenceTest, MatchesPyTorchAndTheF32CacheAtTheMargin) {
  const auto [flavor, dtype] = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = TempDir("kvbf16_" + std::to_string(static_cast<int>(flavor)) + DTypeName(dtype).data());
  TestModel model(flavor, dtype, /*seed=*/21 + static_cast<int>(flavor), /*vocab=*/512, /*layers=*/2);
  model.WriteReferenceFiles(dir, kSteps);
  std::ofstream(dir + "/config.txt", std::ios::app) << "kv_bf16 1\n";
  auto bf16 = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2, .kv_dtype = cpu::KvDtype::kBf16});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  CompareWithReference(**bf16, dir, kSteps, DType::kBF16);  // bf16 tolerances, whatever the weights
  std::filesystem::remove_all(dir);

  // Against an f32 cache, prompt logits and greedy decoding.
  auto f32 = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  ASSERT_TRUE(f32.ok()) << f32.status();
  const std::vector<int32_t> prompt = {5, 77, 301, 9, 140, 33, 480, 2, 61, 250, 17, 399, 88};
  const int bs = 4, blocks = (13 + kSteps + 3) / 4;
  ASSERT_TRUE((*f32)->AllocateKvCache(blocks, bs).ok());
  const auto want = testing_model::Generate(**f32, prompt, kSteps, 0, bs, 0, blocks);
  const auto got = testing_model::Generate(**bf16, prompt, kSteps, 0, bs, 0, blocks);
  const double worst = WorstRelative(want.prompt_logits, got.prompt_logits);
  EXPECT_LE(worst, kKvBf16Bound);
  const size_t same = ExpectFlipOnlyNearATie(want, got, kKvBf16Bound, "bf16 vs f32 KV");
  std::cout << "bf16 vs f32 KV: worst |dlogit| / max|logit| " << worst << ", greedy equal for " << same << " of "
            << want.tokens.size() << " steps\n";
}

INSTANTIATE_TEST_SUITE_P(Models, Bf16KvReferenceTest,
                         ::testing::Combine(::testing::Values(Flavor::kLlama3, Flavor::kQwen3),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

// An fp8 (e4m3) KV cache (--kv-cache-dtype fp8_e4m3), with per-layer scales
// as a checkpoint's kv_cache_scheme gives them (not powers of two, so the
// scales' multiplies round):
// - against the PyTorch reference, which rounds K (after RoPE) / k_scale and
//   V / v_scale through e4m3 from the format's definition: prompt logits and
//   hidden states within kKvFp8RefBound x max |value| (an element within f32
//   noise of a rounding boundary may land one e4m3 step, 1/16, apart);
// - against an f32 cache: prompt logits within kKvFp8Bound x max |logit|,
//   greedy tokens equal up to a first flip at a top-2 margin within twice
//   that bound, and the top-1 agreement of the prompt positions' logits over
//   held prompts reported (with bf16's beside it).
constexpr double kKvFp8RefBound = 5e-3;
constexpr double kKvFp8Bound = 8e-2;

// The share of rows whose argmax agrees.
double Top1Agreement(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  size_t same = 0;
  for (size_t p = 0; p < a.size(); ++p) {
    same += std::max_element(a[p].begin(), a[p].end()) - a[p].begin() ==
            std::max_element(b[p].begin(), b[p].end()) - b[p].begin();
  }
  return a.empty() ? 1.0 : static_cast<double>(same) / a.size();
}

class Fp8KvReferenceTest : public ::testing::TestWithParam<Flavor> {};

TEST_P(Fp8KvReferenceTest, MatchesPyTorchAndTheF32CacheAtTheMargin) {
  const Flavor flavor = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = TempDir("kvfp8_" + std::to_string(static_cast<int>(flavor)));
  TestModel model(flavor, DType::kBF16, /*seed=*/31 + static_cast<int>(flavor), /*vocab=*/512, /*layers=*/2);
  model.WriteReferenceFiles(dir, kSteps);
  const float k_scale = 0.037f, v_scale = 0.011f;
  std::ofstream(dir + "/config.txt", std::ios::app) << "kv_fp8 1\nkv_fp8_k_scale " << k_scale
                                                    << "\nkv_fp8_v_scale " << v_scale << "\n";
  const std::vector<float> scales = {k_scale, v_scale, k_scale, v_scale};
  auto fp8 = CpuBackend::Create(model.config(), model.weights(),
                                {.num_threads = 2, .kv_dtype = cpu::KvDtype::kFp8E4m3, .kv_scales = scales});
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  {
    const int vocab = model.config().vocab_size;
    const std::vector<int32_t> prompt = RunReference(dir, vocab);
    ASSERT_FALSE(::testing::Test::HasFailure());
    const int bs = 4, blocks = (13 + kSteps + 3) / 4;
    ASSERT_TRUE((*fp8)->AllocateKvCache(blocks, bs).ok());
    const auto gen = testing_model::Generate(**fp8, prompt, kSteps, 0, bs, 0, blocks);
    const std::vector<char> bytes = ReadFile(dir + "/prompt_logits.bin");
    ASSERT_EQ(bytes.size(), gen.prompt_logits.size() * vocab * sizeof(float));
    std::vector<std::vector<float>> ref(gen.prompt_logits.size(), std::vector<float>(vocab));
    for (size_t p = 0; p < ref.size(); ++p) std::memcpy(ref[p].data(), bytes.data() + p * vocab * 4, vocab * 4);
    const double worst = WorstRelative(ref, gen.prompt_logits);
    EXPECT_LE(worst, kKvFp8RefBound);
    std::cout << "fp8 KV vs PyTorch's fp8 reference: worst |dlogit| / max|logit| " << worst << "\n";
  }
  std::filesystem::remove_all(dir);

  // Against f32 and bf16 caches over held prompts.
  auto f32 = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  auto bf16 = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2, .kv_dtype = cpu::KvDtype::kBf16});
  ASSERT_TRUE(f32.ok() && bf16.ok());
  std::mt19937 rng(77);
  double worst = 0, agree_fp8 = 0, agree_bf16 = 0;
  constexpr int kPrompts = 8;
  for (int n = 0; n < kPrompts; ++n) {
    std::vector<int32_t> prompt(24);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % model.config().vocab_size);
    const int bs = 4, blocks = (24 + kSteps + 3) / 4;
    for (auto* b : {&*f32, &*bf16, &*fp8}) ASSERT_TRUE((**b).AllocateKvCache(blocks, bs).ok());
    const auto want = testing_model::Generate(**f32, prompt, kSteps, 0, bs, 0, blocks);
    const auto got = testing_model::Generate(**fp8, prompt, kSteps, 0, bs, 0, blocks);
    const auto half = testing_model::Generate(**bf16, prompt, kSteps, 0, bs, 0, blocks);
    worst = std::max(worst, WorstRelative(want.prompt_logits, got.prompt_logits));
    agree_fp8 += Top1Agreement(want.prompt_logits, got.prompt_logits) / kPrompts;
    agree_bf16 += Top1Agreement(want.prompt_logits, half.prompt_logits) / kPrompts;
    ExpectFlipOnlyNearATie(want, got, kKvFp8Bound, "fp8 vs f32 KV, prompt " + std::to_string(n));
  }
  EXPECT_LE(worst, kKvFp8Bound);
  EXPECT_GE(agree_fp8, 0.9) << "fp8's prompt top-1 agreement with f32";
  std::cout << "fp8 vs f32 KV over " << kPrompts << " prompts: worst |dlogit| / max|logit| " << worst
            << "; prompt top-1 agreement fp8 " << agree_fp8 << ", bf16 " << agree_bf16 << "\n";
}

INSTANTIATE_TEST_SUITE_P(Models, Fp8KvReferenceTest, ::testing::Values(Flavor::kLlama3, Flavor::kQwen3));

// A real checkpoint folder: the random-checkpoint writer's safetensors, loaded
// by Checkpoint::Load, and read independently by the script. The "tiny" preset
// has the full Llama 3 vocabulary (128256), so fewer steps.
// The third parameter names the preset ("tiny-swiftkv": a SwiftKV
// checkpoint in the public checkpoints' format, read by the script from the
// safetensors names alone).
// The fourth parameter leaves some Linears dense in a quantized checkpoint
// (`ignore`): layer 0's q|k|v and layer 1's down_proj.
class CheckpointReferenceTest
    : public ::testing::TestWithParam<std::tuple<const char*, DType, const char*, bool>> {};

TEST_P(CheckpointReferenceTest, LoadedCheckpointMatchesPyTorch) {
  const auto [architecture, dtype, preset, keep_some_dense] = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = TempDir(std::string("ckpt") + architecture + preset + DTypeName(dtype).data() +
                                  (keep_some_dense ? "mixed" : ""));
  CheckpointSpec spec;
  spec.preset = preset;
  spec.architecture = architecture;
  spec.dtype = IsQuantized(dtype) ? DType::kBF16 : dtype;
  spec.seed = 7;
  if (IsQuantized(dtype)) {  // make-model --quantize's path: a bf16 checkpoint, then quantized
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir + "/dense").ok());
    std::vector<std::string> keep_dense;
    if (keep_some_dense) {
      keep_dense = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                    "model.layers.0.self_attn.v_proj", "model.layers.1.mlp.down_proj"};
    }
    const absl::Status quantized = QuantizeCheckpoint(dir + "/dense", dir, dtype, keep_dense);
    ASSERT_TRUE(quantized.ok()) << quantized;
  } else {
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir).ok());
  }
  auto checkpoint = Checkpoint::Load(dir, LoadOptions{});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_EQ((*checkpoint)->weights().layers[0].o_proj.dtype, dtype);
  if (keep_some_dense) ASSERT_EQ((*checkpoint)->weights().layers[1].down_proj.dtype, DType::kBF16);
  // The bar for quantized checkpoints: 64 greedy tokens.
  const int kCheckpointSteps = IsQuantized(dtype) ? 64 : 16;
  testing_model::WriteReferenceConfig((*checkpoint)->config(), dtype, kCheckpointSteps, dir);
  auto backend = CpuBackend::Create((*checkpoint)->config(), (*checkpoint)->weights(), {.num_threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  CompareWithReference(**backend, dir, kCheckpointSteps, dtype);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CheckpointReferenceTest,
                         ::testing::Values(std::make_tuple("", DType::kBF16, "tiny", false),
                                           std::make_tuple("Qwen2ForCausalLM", DType::kF32, "tiny", false),
                                           std::make_tuple("", DType::kF8E4M3, "tiny", false),
                                           std::make_tuple("", DType::kI8, "tiny", false),
                                           std::make_tuple("", DType::kI8, "tiny", true),
                                           std::make_tuple("Qwen3ForCausalLM", DType::kF8E4M3, "tiny", false),
                                           std::make_tuple("", DType::kBF16, "tiny-swiftkv", false)));

// Linears packed into one matrix share a dtype: a checkpoint leaving only
// some of them dense is refused, naming both, as vLLM refuses it.
TEST(MixedQuantizationTest, PartlyDenseFusedGroupIsRefusedByName) {
  const std::string dir = TempDir("partly-dense");
  CheckpointSpec spec;
  spec.seed = 5;
  ASSERT_TRUE(WriteRandomCheckpoint(spec, dir + "/dense").ok());
  const std::pair<const char*, const char*> cases[] = {
      {"model.layers.1.self_attn.k_proj",
       "weight layers.1.self_attn.k_proj is bf16 but layers.1.self_attn.q_proj is f8_e4m3"},
      {"model.layers.0.mlp.gate_proj", "weight layers.0.mlp.up_proj is f8_e4m3 but layers.0.mlp.gate_proj is bf16"}};
  for (const auto& [module, want] : cases) {
    const std::string out = dir + "/" + module;
    ASSERT_TRUE(QuantizeCheckpoint(dir + "/dense", out, DType::kF8E4M3, {module}).ok());
    auto checkpoint = Checkpoint::Load(out, LoadOptions{});
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    auto backend = CpuBackend::Create((*checkpoint)->config(), (*checkpoint)->weights(), {.num_threads = 1});
    ASSERT_FALSE(backend.ok()) << module;
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(backend.status().message()), ::testing::HasSubstr(want));
  }
  std::filesystem::remove_all(dir);
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<Flavor, DType>>& info) {
  static const char* const kNames[] = {"Llama3", "Qwen2", "Qwen3", "SwiftKV"};
  return std::string(kNames[static_cast<int>(std::get<0>(info.param))]) +
         (std::get<1>(info.param) == DType::kF32 ? "F32" : "Bf16");
}

INSTANTIATE_TEST_SUITE_P(
    Flavors, ReferenceTest,
    ::testing::Combine(::testing::Values(Flavor::kLlama3, Flavor::kQwen2, Flavor::kQwen3, Flavor::kSwiftKV),
                       ::testing::Values(DType::kF32, DType::kBF16)),
    CaseName);

// SwiftKV as the engine runs it: prompt chunks that want no logits stop
// after the later layers' KV projection, the final chunk runs those layers
// for its last row only, and decode rows for themselves. The last prompt
// row's logits match the reference's (same tolerances), and the 64-token
// greedy continuation is the reference's.
class SwiftKVTest : public ::testing::TestWithParam<DType> {};

TEST_P(SwiftKVTest, ChunkedPrefillWithoutLogitsMatchesPyTorch) {
  const DType dtype = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " missing: run scripts/bootstrap.sh (python3-torch)";
  const std::string dir = TempDir(std::string("swiftkv_chunks") + DTypeName(dtype).data());
  TestModel model(Flavor::kSwiftKV, dtype, /*seed=*/23, /*vocab=*/512, /*layers=*/4);
  model.WriteReferenceFiles(dir, kSteps);
  const int vocab = model.config().vocab_size;
  const std::vector<int32_t> prompt = RunReference(dir, vocab);
  ASSERT_FALSE(HasFailure());
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int block_size = 4, max_blocks = (13 + kSteps + 3) / 4;
  ASSERT_TRUE((*backend)->AllocateKvCache(max_blocks, block_size).ok());
  std::vector<int32_t> table(max_blocks);
  for (int i = 0; i < max_blocks; ++i) table[i] = max_blocks - 1 - i;
  auto step = [&](std::span<const int32_t> tokens, int start, int num_logits, float* logits) {
    ForwardSequence seq;
    seq.tokens = tokens;
    seq.start_pos = start;
    seq.block_table = {table.data(), static_cast<size_t>((start + tokens.size() + block_size - 1) / block_size)};
    seq.num_logits = num_logits;
    const absl::Status s = (*backend)->Forward({&seq, 1}, logits);
    EXPECT_TRUE(s.ok()) << s;
  };
  // Chunks of 5, 5 and 3: the first two want no logits (a prefix-cache hit
  // looks the same: its blocks were written by an earlier step).
  std::vector<float> last(vocab);
  const std::span<const int32_t> all(prompt);
  step(all.subspan(0, 5), 0, 0, nullptr);
  step(all.subspan(5, 5), 5, 0, nullptr);
  step(all.subspan(10, 3), 10, 1, last.data());
  std::vector<std::vector<float>> last_row = {last};
  std::vector<char> ref = ReadFile(dir + "/prompt_logits.bin");
  ASSERT_EQ(ref.size(), 13u * vocab * sizeof(float));
  {
    std::ofstream f(dir + "/last_logits.bin", std::ios::binary);
    f.write(ref.data() + 12 * vocab * sizeof(float), vocab * sizeof(float));
  }
  ExpectRowsMatchReference(last_row, dir + "/last_logits.bin", vocab, dtype, "last-row logits (chunked, SwiftKV)");
  std::vector<int32_t> tokens;
  for (int s = 0; s < kSteps; ++s) {
    tokens.push_back(testing_model::Argmax(last));
    if (s + 1 < kSteps) step({&tokens.back(), 1}, 13 + s, 1, last.data());
  }
  EXPECT_EQ(tokens, ReferenceGreedy(dir, kSteps));
  std::set<int32_t> distinct(tokens.begin(), tokens.end());
  EXPECT_GE(distinct.size(), 3u) << "degenerate continuation: the test would prove little";
  std::filesystem::remove_all(dir);
}

// Two sequences in one step, each wanting only its last row's logits: the
// narrowed step drops rows from the middle of the batch. Each sequence's
// logits are bit-identical to its run alone (the kernels are batch-invariant).
TEST_P(SwiftKVTest, NarrowedBatchEqualsEachSequenceAlone) {
  const DType dtype = GetParam();
  TestModel model(Flavor::kSwiftKV, dtype, /*seed=*/29, /*vocab=*/512, /*layers=*/4);
  const int vocab = model.config().vocab_size, block_size = 4;
  std::mt19937 rng(3);
  std::vector<int32_t> a(11), b(7);
  for (int32_t& t : a) t = static_cast<int32_t>(rng() % vocab);
  for (int32_t& t : b) t = static_cast<int32_t>(rng() % vocab);
  std::vector<int32_t> table_a = {0, 1, 2}, table_b = {3, 4};
  auto make = [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& table, int num_logits) {
    ForwardSequence seq;
    seq.tokens = tokens;
    seq.block_table = table;
    seq.num_logits = num_logits;
    return seq;
  };
  auto run = [&](std::vector<ForwardSequence> batch, int rows) {
    auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
    EXPECT_TRUE(backend.ok()) << backend.status();
    EXPECT_TRUE((*backend)->AllocateKvCache(5, block_size).ok());
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    const absl::Status s = (*backend)->Forward(batch, logits.data());
    EXPECT_TRUE(s.ok()) << s;
    return logits;
  };
  const std::vector<float> alone_a = run({make(a, table_a, 1)}, 1);
  const std::vector<float> alone_b = run({make(b, table_b, 2)}, 2);
  const std::vector<float> both = run({make(a, table_a, 1), make(b, table_b, 2)}, 3);
  EXPECT_TRUE(std::equal(alone_a.begin(), alone_a.end(), both.begin()));
  EXPECT_TRUE(std::equal(alone_b.begin(), alone_b.end(), both.begin() + vocab));
}

// With swiftkv off, a SwiftKV checkpoint is its dense Llama: the same
// weights served as LlamaForCausalLM give bit-identical logits and tokens.
TEST_P(SwiftKVTest, SwiftKVOffIsTheDenseModel) {
  const DType dtype = GetParam();
  TestModel model(Flavor::kSwiftKV, dtype, /*seed=*/31, /*vocab=*/512, /*layers=*/4);
  ModelConfig off = model.config();
  off.swiftkv = false;
  ModelConfig dense = off;
  dense.architecture = Architecture::kLlama;
  dense.num_key_value_layers = dense.num_layers;
  std::vector<int32_t> prompt(9);
  std::mt19937 rng(8);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 512);
  auto generate = [&](const ModelConfig& config) {
    auto backend = CpuBackend::Create(config, model.weights(), {.num_threads = 2});
    EXPECT_TRUE(backend.ok()) << backend.status();
    EXPECT_TRUE((*backend)->AllocateKvCache(12, 4).ok());
    return testing_model::Generate(**backend, prompt, 24, /*chunk=*/4, 4, /*first_block=*/0, 12);
  };
  const auto a = generate(off), b = generate(dense);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.prompt_logits, b.prompt_logits);
  // And SwiftKV on changes them (the test would be empty otherwise).
  const auto on = generate(model.config());
  EXPECT_NE(on.prompt_logits.back(), a.prompt_logits.back());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SwiftKVTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return info.param == DType::kF32 ? "F32" : "Bf16";
                         });

}  // namespace
}  // namespace floe
