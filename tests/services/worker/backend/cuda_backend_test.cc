// The CUDA backend against the CPU backend, the reference, on the same
// seeded models (label gpu; each test reports "skipped: no CUDA device"
// where none is visible). Tolerances, relative to the step's largest |logit|:
// f32 weights 1e-4 (only the summation order differs), bf16 weights 2e-2
// (a matmul input rounded to bf16 may land on the other side of a rounding
// boundary than on the CPU). Greedy tokens must agree wherever the CPU's
// top-two margin exceeds that tolerance; the first step within it ends the
// comparison of that generation (the two may then diverge legitimately).
#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/cuda/model_kernels.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/backend/cuda_backend.h"
#include "services/worker/sampling/sampler.h"
#include "tests/services/worker/backend/test_model.h"

namespace floe {
namespace {

using testing_model::Flavor;
using testing_model::Generate;
using testing_model::Generation;
using testing_model::TestModel;

#define FLOE_REQUIRE_CUDA_DEVICE()                                            \
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device"

std::vector<int32_t> Prompt(int n, int seed, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (seed * 131 + i * 37) % vocab;
  return p;
}

float Tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-4f : 2e-2f; }

// Max |a - b| over the row, relative to 1 + max |b|.
float RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 1.0f, diff = 0.0f;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  return diff / scale;
}

// The gap between the largest and second-largest logit, relative as above.
float Margin(const std::vector<float>& v) {
  float top = -INFINITY, second = -INFINITY, scale = 1.0f;
  for (float x : v) {
    scale = std::max(scale, std::abs(x));
    if (x > top) {
      second = top;
      top = x;
    } else if (x > second) {
      second = x;
    }
  }
  return (top - second) / scale;
}

void ExpectAgree(const Generation& gpu, const Generation& cpu, DType dtype, const std::string& what) {
  const float tol = Tolerance(dtype);
  ASSERT_EQ(gpu.prompt_logits.size(), cpu.prompt_logits.size());
  for (size_t i = 0; i < cpu.prompt_logits.size(); ++i) {
    EXPECT_LE(RelativeError(gpu.prompt_logits[i], cpu.prompt_logits[i]), tol) << what << " prompt row " << i;
    EXPECT_LE(RelativeError(gpu.prompt_hidden[i], cpu.prompt_hidden[i]), tol) << what << " hidden row " << i;
  }
  for (size_t s = 0; s < cpu.tokens.size(); ++s) {
    // Both backends fed their own tokens: equal so far, so the same inputs.
    EXPECT_LE(RelativeError(gpu.step_logits[s], cpu.step_logits[s]), tol) << what << " step " << s;
    if (Margin(cpu.step_logits[s]) <= 2 * tol) break;  // a near tie: either token is right
    ASSERT_EQ(gpu.tokens[s], cpu.tokens[s]) << what << " step " << s;
  }
}

struct Case {
  Flavor flavor;
  DType dtype;
};

class CudaBackendTest : public ::testing::TestWithParam<Case> {};

INSTANTIATE_TEST_SUITE_P(Models, CudaBackendTest,
                         ::testing::Values(Case{Flavor::kLlama3, DType::kF32}, Case{Flavor::kLlama3, DType::kBF16},
                                           Case{Flavor::kQwen2, DType::kBF16}, Case{Flavor::kQwen3, DType::kBF16},
                                           Case{Flavor::kSwiftKV, DType::kBF16}));

TEST_P(CudaBackendTest, PrefillAndGreedyDecodeMatchTheCpuBackend) {
  FLOE_REQUIRE_CUDA_DEVICE();
  TestModel model(GetParam().flavor, GetParam().dtype, 7);
  auto cpu = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = CudaBackend::Create(model.config(), model.weights(), {});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int bs = 4;
  ASSERT_TRUE((*cpu)->AllocateKvCache(128, bs).ok());
  ASSERT_TRUE((*gpu)->AllocateKvCache(128, bs).ok());
  // Several prompts; chunked prefill (5 tokens per step) and whole; 64 greedy tokens.
  for (int seed = 1; seed <= 3; ++seed) {
    const std::vector<int32_t> prompt = Prompt(17 + 5 * seed, seed, model.config().vocab_size);
    const int chunk = seed == 2 ? 5 : 0;
    // Seed 3 asks only the last prompt row's logits, as the engine does: a
    // SwiftKV step then narrows to that row (rows move on the device).
    const bool last_only = seed == 3;
    const Generation want = Generate(**cpu, prompt, 64, chunk, bs, 0, 32, last_only);
    const Generation got = Generate(**gpu, prompt, 64, chunk, bs, 0, 32, last_only);
    ExpectAgree(got, want, GetParam().dtype, "seed " + std::to_string(seed));
  }
  EXPECT_TRUE((*gpu)->healthy());
}

// A narrow KV cache on both backends (the same dtype and scales): prompts
// of 16 rows or more run PrefillAttentionMma on sm_80+, which rounds Q and
// the softmax weights to bf16 where the CPU keeps them f32; bf16 weights'
// tolerance covers it. Prompts of 22 to 130 tokens (up to three 64-row
// tiles, a tile's keys past 64), whole and in 5-token chunks.
struct NarrowCase {
  cpu::KvDtype cpu;
  cuda::KvDtype cuda;
};

class CudaBackendNarrowKvTest : public ::testing::TestWithParam<NarrowCase> {};

INSTANTIATE_TEST_SUITE_P(KvDtypes, CudaBackendNarrowKvTest,
                         ::testing::Values(NarrowCase{cpu::KvDtype::kBf16, cuda::KvDtype::kBf16},
                                           NarrowCase{cpu::KvDtype::kFp8E4m3, cuda::KvDtype::kFp8E4m3}));

TEST_P(CudaBackendNarrowKvTest, PrefillAndGreedyDecodeMatchTheCpuBackend) {
  FLOE_REQUIRE_CUDA_DEVICE();
  TestModel model(Flavor::kLlama3, DType::kBF16, 11);
  const int layers = model.config().num_layers;
  std::vector<float> scales;  // fp8: per-layer scales that are not powers of two
  for (int i = 0; i < 2 * layers; ++i) scales.push_back(GetParam().cuda == cuda::KvDtype::kFp8E4m3 ? 0.05f + 0.01f * i : 1.0f);
  CpuBackendOptions cpu_options{.num_threads = 2};
  cpu_options.kv_dtype = GetParam().cpu;
  cpu_options.kv_scales = scales;
  CudaBackendOptions gpu_options;
  gpu_options.kv_dtype = GetParam().cuda;
  gpu_options.kv_scales = scales;
  auto cpu = CpuBackend::Create(model.config(), model.weights(), cpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = CudaBackend::Create(model.config(), model.weights(), gpu_options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int bs = 4;
  ASSERT_TRUE((*cpu)->AllocateKvCache(128, bs).ok());
  ASSERT_TRUE((*gpu)->AllocateKvCache(128, bs).ok());
  const int lengths[] = {22, 70, 130};
  for (int seed = 1; seed <= 3; ++seed) {
    const std::vector<int32_t> prompt = Prompt(lengths[seed - 1], seed, model.config().vocab_size);
    for (int chunk : {0, 5}) {
      const Generation want = Generate(**cpu, prompt, 32, chunk, bs, 0, 64);
      const Generation got = Generate(**gpu, prompt, 32, chunk, bs, 0, 64);
      ExpectAgree(got, want, DType::kBF16,
                  "prompt of " + std::to_string(prompt.size()) + (chunk ? ", chunked" : ", whole"));
    }
  }
  EXPECT_TRUE((*gpu)->healthy());
}

TEST_P(CudaBackendTest, TreeVerificationMatchesTheCpuBackend) {
  FLOE_REQUIRE_CUDA_DEVICE();
  if (GetParam().flavor == Flavor::kSwiftKV) GTEST_SKIP() << "SwiftKV trees are covered by the CPU tests";
  TestModel model(GetParam().flavor, GetParam().dtype, 11);
  auto cpu = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2});
  auto gpu = CudaBackend::Create(model.config(), model.weights(), {});
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  const int bs = 4;
  Backend* backends[] = {cpu->get(), gpu->get()};
  std::vector<float> logits[2], after[2];
  const int vocab = model.config().vocab_size;
  const std::vector<int32_t> prompt = Prompt(9, 5, vocab);
  const std::vector<int32_t> table = {3, 1, 4, 0, 2, 5};
  // A tree of 6 under the last prompt token (position 8): 0 -> {1, 2},
  // 1 -> {3, 4}, 2 -> {5}; token i's KV at position 8 + i.
  const std::vector<int32_t> tree = {prompt.back(), 7, 9, 11, 13, 15};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2};
  const int32_t next = 17;
  const std::vector<int32_t> other_prompt = Prompt(7, 6, vocab);
  const std::vector<int32_t> other_table = {8, 9};
  for (int b = 0; b < 2; ++b) {
    ASSERT_TRUE(backends[b]->AllocateKvCache(16, bs).ok());
    ForwardSequence pre{{prompt.data(), prompt.size() - 1}, 0, {table.data(), 2}, 0};
    ASSERT_TRUE(backends[b]->Forward({&pre, 1}, nullptr).ok());
    // In one step with another sequence's chain (a 7-token prompt in
    // blocks 8 and 9): per-sequence block tables and masks side by side.
    ForwardSequence verify{tree, 8, {table.data(), 4}, 6};
    verify.parents = parents;
    ForwardSequence other{other_prompt, 0, other_table, 2};
    const ForwardSequence batch[] = {other, verify};
    logits[b].resize(8 * vocab);
    ASSERT_TRUE(backends[b]->Forward(batch, logits[b].data()).ok());
    // Accept the path 0 -> 1 -> 3: token 3's KV (position 11: block
    // table[2] = 4, slot 3) moves to the chain's position 10 (slot 2), and
    // the next token decodes at position 11 over that chain.
    const KvSlotCopy copies[] = {{4, 3, 4, 2}};
    ASSERT_TRUE(backends[b]->CopyKvSlots(copies).ok());
    ForwardSequence decode{{&next, 1}, 11, {table.data(), 3}, 1};
    after[b].resize(vocab);
    ASSERT_TRUE(backends[b]->Forward({&decode, 1}, after[b].data()).ok());
  }
  for (int row = 0; row < 8; ++row) {  // the chain's last 2 rows, then the tree's 6
    const std::vector<float> want(logits[0].begin() + row * vocab, logits[0].begin() + (row + 1) * vocab);
    const std::vector<float> got(logits[1].begin() + row * vocab, logits[1].begin() + (row + 1) * vocab);
    EXPECT_LE(RelativeError(got, want), Tolerance(GetParam().dtype)) << "logits row " << row;
  }
  EXPECT_LE(RelativeError(after[1], after[0]), Tolerance(GetParam().dtype)) << "decode after the copy";
}

// The engine's step on the device: logits kept there, tokens drawn there.
// The draws must be what the CPU sampler draws from the same logits
// (downloaded through the same call), greedy exactly, seeded up to a draw
// at the margin (kernels/cuda/sampling.h).
TEST(CudaBackendSamplingTest, DrawsOnTheDeviceWhatTheHostSamplerDraws) {
  FLOE_REQUIRE_CUDA_DEVICE();
  TestModel model(Flavor::kLlama3, DType::kBF16, 5);
  auto gpu = CudaBackend::Create(model.config(), model.weights(), {});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->SamplesOnDevice());
  ASSERT_TRUE((*gpu)->AllocateKvCache(64, 4).ok());
  const int vocab = model.config().vocab_size;
  const std::vector<int32_t> prompt = Prompt(23, 4, vocab);
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  ForwardSequence seq{prompt, 0, table, static_cast<int32_t>(prompt.size())};  // every row's logits
  ASSERT_TRUE((*gpu)->Forward({&seq, 1}, nullptr).ok());
  std::vector<RowSampling> rows(prompt.size());
  for (RowSampling& r : rows) r.action = RowSampling::Action::kDownload;
  std::vector<float> logits(rows.size() * vocab);
  std::vector<int32_t> tokens(rows.size(), -7);
  ASSERT_TRUE((*gpu)->SampleLogits(rows, tokens.data(), logits.data()).ok());
  EXPECT_EQ(tokens, std::vector<int32_t>(rows.size(), -7)) << "downloads write no token";
  int mismatches = 0;
  for (int trial = 0; trial < 4; ++trial) {
    for (size_t i = 0; i < rows.size(); ++i) {
      RowSampling& r = rows[i];
      r = RowSampling();
      r.position = static_cast<int64_t>(i) + 100 * trial;
      r.seed = 77 + trial;
      if (i % 4 != 0) r.temperature = 0.7f;  // every fourth row greedy
      if (i % 4 == 2) r.top_k = 20;
      if (i % 4 == 3) r.top_p = 0.9f, r.min_p = 0.01f;
    }
    std::vector<float> declined(logits.size());
    ASSERT_TRUE((*gpu)->SampleLogits(rows, tokens.data(), declined.data()).ok());
    for (size_t i = 0; i < rows.size(); ++i) {
      SamplingOptions options;
      options.temperature = rows[i].temperature;
      options.top_k = rows[i].top_k;
      options.top_p = rows[i].top_p;
      options.min_p = rows[i].min_p;
      options.seed = rows[i].seed;
      SamplingContext context;
      context.output_position = rows[i].position;
      std::vector<float> row(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
      const int32_t want = Sampler::Sample(options, context, row);
      if (tokens[i] == -1) continue;  // declined: the host samples it (allowed)
      if (options.greedy()) {
        EXPECT_EQ(tokens[i], want) << "greedy row " << i;
      } else {
        mismatches += tokens[i] != want;
      }
    }
  }
  EXPECT_LE(mismatches, 1) << "seeded draws off the CPU sampler's beyond a margin case";
  EXPECT_TRUE((*gpu)->healthy());
}

// Decode steps replay CUDA graphs (batches padded to 1, 2, 4, ...): the
// same logits as eager steps (f32: 1e-4, the GEMMs' m differs with the
// padding), batched and alone, and again after a long prompt grows the
// activations under the graphs (they are captured again).
TEST(CudaBackendGraphTest, GraphStepsMatchEagerSteps) {
  FLOE_REQUIRE_CUDA_DEVICE();
  TestModel model(Flavor::kLlama3, DType::kF32, 9);
  CudaBackendOptions eager_options;
  eager_options.cuda_graphs = false;
  auto graphs = CudaBackend::Create(model.config(), model.weights(), {});
  auto eager = CudaBackend::Create(model.config(), model.weights(), eager_options);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  ASSERT_TRUE(eager.ok()) << eager.status();
  const int bs = 4, vocab = model.config().vocab_size;
  // Graphs pad only within the activations reserved at start.
  ASSERT_TRUE((*graphs)->ReserveActivations(64, 8).ok());
  ASSERT_TRUE((*graphs)->AllocateKvCache(256, bs).ok());
  ASSERT_TRUE((*eager)->AllocateKvCache(256, bs).ok());
  struct Seq {
    std::vector<int32_t> tokens, table;
    int32_t pos = 0;
  };
  std::vector<Seq> seqs(4);
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < 64; ++b) seqs[s].table.push_back(s * 64 + b);
  }
  // Runs `which` sequences' next tokens on both backends; compares and
  // feeds each sequence the eager backend's arg-max.
  auto step = [&](const std::vector<int>& which, const std::string& what) {
    std::vector<ForwardSequence> batch;
    for (int s : which) {
      batch.push_back({seqs[s].tokens, seqs[s].pos, seqs[s].table, 1});
    }
    std::vector<float> want(which.size() * vocab), got(which.size() * vocab);
    ASSERT_TRUE((*eager)->Forward(batch, want.data()).ok()) << what;
    ASSERT_TRUE((*graphs)->Forward(batch, got.data()).ok()) << what;
    for (size_t i = 0; i < which.size(); ++i) {
      const std::vector<float> w(want.begin() + i * vocab, want.begin() + (i + 1) * vocab);
      const std::vector<float> g(got.begin() + i * vocab, got.begin() + (i + 1) * vocab);
      EXPECT_LE(RelativeError(g, w), 1e-4f) << what << " sequence " << which[i];
      Seq& seq = seqs[which[i]];
      seq.pos += static_cast<int32_t>(seq.tokens.size());
      seq.tokens = {testing_model::Argmax(w)};
    }
  };
  for (int s = 0; s < 3; ++s) {
    seqs[s].tokens = Prompt(5 + 4 * s, s + 1, vocab);
    step({s}, "prompt " + std::to_string(s));
  }
  for (int i = 0; i < 12; ++i) step(i % 4 == 3 ? std::vector<int>{1} : std::vector<int>{0, 1, 2}, "decode " + std::to_string(i));
  seqs[3].tokens = Prompt(200, 9, vocab);  // grows the activations under the captured graphs
  step({3}, "long prompt");
  for (int i = 0; i < 8; ++i) step({0, 1, 2, 3}, "decode after growth " + std::to_string(i));
  EXPECT_TRUE((*graphs)->healthy());
}

TEST(CudaBackendInputTest, BadBatchesAreRefusedBeforeTheDevice) {
  FLOE_REQUIRE_CUDA_DEVICE();
  TestModel model(Flavor::kLlama3, DType::kBF16, 3);
  auto gpu = CudaBackend::Create(model.config(), model.weights(), {});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<int32_t> table = {0};
  ForwardSequence seq{tokens, 0, table, 1};
  EXPECT_EQ((*gpu)->Forward({&seq, 1}, nullptr).code(), absl::StatusCode::kFailedPrecondition);  // no KV yet
  ASSERT_TRUE((*gpu)->AllocateKvCache(4, 4).ok());
  const std::vector<int32_t> far = {9};
  ForwardSequence outside{tokens, 0, far, 1};
  EXPECT_EQ((*gpu)->Forward({&outside, 1}, nullptr).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad_token = {model.config().vocab_size};
  ForwardSequence token{bad_token, 0, table, 1};
  EXPECT_EQ((*gpu)->Forward({&token, 1}, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*gpu)->healthy());  // refused input is not a device fault
  auto budget = (*gpu)->KvCacheBudget(1.5);
  EXPECT_EQ(budget.status().code(), absl::StatusCode::kInvalidArgument);
  auto tiny = (*gpu)->KvCacheBudget(1e-9);
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(tiny.status().message().find("--gpu-memory-utilization"), std::string::npos);
}

}  // namespace
}  // namespace floe
