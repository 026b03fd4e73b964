// Backend-level batch invariance and input validation. Invariance is exact
// (bit-identical logits): every kernel computes a token's row the same way
// whatever else is in the batch or how its prompt was chunked.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "gtest/gtest.h"
#include "services/worker/backend/cpu_backend.h"
#include "tests/services/worker/backend/test_model.h"

namespace floe {
namespace {

using testing_model::Flavor;
using testing_model::Generate;
using testing_model::TestModel;

std::vector<int32_t> Prompt(int n, int seed, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (seed * 131 + i * 37) % vocab;
  return p;
}

// Weights f32 or bf16, KV cache f32 or bf16.
class BatchInvarianceTest : public ::testing::TestWithParam<std::tuple<DType, cpu::KvDtype>> {};

TEST_P(BatchInvarianceTest, AloneChunkedAndBatchedGiveIdenticalLogits) {
  const auto [weights, kv_dtype] = GetParam();
  TestModel model(Flavor::kQwen2, weights, 3);
  const int vocab = model.config().vocab_size, bs = 4;
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 2, .kv_dtype = kv_dtype});
  ASSERT_TRUE(backend.ok()) << backend.status();
  Backend& b = **backend;
  ASSERT_TRUE(b.AllocateKvCache(64, bs).ok());
  const std::vector<int32_t> prompt = Prompt(23, 1, vocab);
  auto alone = Generate(b, prompt, 6, 0, bs, 0, 8);
  auto chunked = Generate(b, prompt, 6, 5, bs, 20, 8);
  ASSERT_EQ(alone.prompt_logits.size(), chunked.prompt_logits.size());
  for (size_t i = 0; i < alone.prompt_logits.size(); ++i) {
    ASSERT_EQ(alone.prompt_logits[i], chunked.prompt_logits[i]) << "position " << i;
    ASSERT_EQ(alone.prompt_hidden[i], chunked.prompt_hidden[i]) << "position " << i;
  }
  EXPECT_EQ(alone.tokens, chunked.tokens);
  for (size_t i = 0; i < alone.step_logits.size(); ++i) {
    ASSERT_EQ(alone.step_logits[i], chunked.step_logits[i]) << "step " << i;
  }

  // The same prompt inside a batch: another sequence's prefill before it, a
  // decode after it, all in one Forward; then batched decode steps.
  const std::vector<int32_t> other = Prompt(9, 2, vocab);
  const std::vector<int32_t> table_a = {40, 41, 42, 43, 44, 45, 46, 47};
  const std::vector<int32_t> table_b = {50, 51, 52, 53, 54};
  const std::vector<int32_t> table_c = {60, 61, 62, 63};  // positions up to 13 at step 5: 4 blocks
  // Sequence C: a 7-token prompt prefilled alone first.
  const std::vector<int32_t> c_prompt = Prompt(7, 3, vocab);
  {
    ForwardSequence c{c_prompt, 0, {table_c.data(), 2}, 0};
    ASSERT_TRUE(b.Forward({&c, 1}, nullptr).ok());
  }
  int32_t c_token = 5, b_token = 0;
  std::vector<int32_t> a_tokens = prompt;
  int32_t a_next = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<ForwardSequence> batch;
    const bool first = step == 0;
    const int a_pos = first ? 0 : static_cast<int>(prompt.size()) + step - 1;
    ForwardSequence sb;
    if (first) {
      sb = {other, 0, {table_b.data(), 3}, 1};
    } else {
      sb = {{&b_token, 1}, static_cast<int32_t>(other.size()) + step - 1, {table_b.data(), 5}, 1};
    }
    ForwardSequence sa;
    if (first) {
      sa = {prompt, 0, {table_a.data(), 6}, static_cast<int32_t>(prompt.size())};
    } else {
      sa = {{&a_next, 1}, a_pos, {table_a.data(), static_cast<size_t>(a_pos / bs + 1)}, 1};
    }
    ForwardSequence sc{{&c_token, 1}, 7 + step, {table_c.data(), static_cast<size_t>((8 + step + 3) / 4)}, 1};
    batch = {sb, sa, sc};
    const int a_logits = sa.num_logits;
    std::vector<float> logits((1 + a_logits + 1) * vocab);
    absl::Status st = b.Forward(batch, logits.data());
    ASSERT_TRUE(st.ok()) << st;
    if (first) {
      for (size_t i = 0; i < prompt.size(); ++i) {
        std::vector<float> row(logits.begin() + (1 + i) * vocab, logits.begin() + (2 + i) * vocab);
        ASSERT_EQ(row, alone.prompt_logits[i]) << "batched prefill position " << i;
      }
    } else {
      std::vector<float> row(logits.begin() + vocab, logits.begin() + 2 * vocab);
      ASSERT_EQ(row, alone.step_logits[step]) << "batched decode step " << step;
    }
    a_next = alone.tokens[step];
    b_token = testing_model::Argmax(std::vector<float>(logits.begin(), logits.begin() + vocab));
    c_token = (c_token * 7 + 1) % vocab;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, BatchInvarianceTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Values(cpu::KvDtype::kF32, cpu::KvDtype::kBf16,
                                                              cpu::KvDtype::kFp8E4m3)));

TEST(CpuBackendTest, ThreadCountDoesNotChangeLogits) {
  TestModel model(Flavor::kQwen3, DType::kBF16, 4);
  const std::vector<int32_t> prompt = Prompt(19, 4, model.config().vocab_size);
  std::vector<testing_model::Generation> gens;
  for (int threads : {1, 2, 3}) {
    auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = threads});
    ASSERT_TRUE(backend.ok());
    ASSERT_TRUE((*backend)->AllocateKvCache(16, 4).ok());
    gens.push_back(Generate(**backend, prompt, 4, 0, 4, 0, 8));
  }
  for (size_t g = 1; g < gens.size(); ++g) {
    EXPECT_EQ(gens[g].prompt_logits, gens[0].prompt_logits);
    EXPECT_EQ(gens[g].step_logits, gens[0].step_logits);
  }
}

// A backend that maps its matrices from the weight cache, or packs them into
// it, computes bit for bit what one that packs in memory does; the file is
// written once and hit after, and a change of weights or layout misses.
TEST(CpuBackendTest, WeightCacheWrittenThenHitGivesIdenticalLogits) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("floe-backend-cache-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  TestModel model(Flavor::kSwiftKV, DType::kBF16, 5, 512, 4);
  const std::vector<int32_t> prompt = Prompt(21, 5, model.config().vocab_size);
  auto run = [&](const std::string& cache_dir, const std::string& fingerprint, WeightCacheReport* report,
                 int* releases) {
    CpuBackendOptions options{.num_threads = 2, .weight_cache_dir = cache_dir, .weights_fingerprint = fingerprint};
    options.release_source_pages = [releases] { ++*releases; };
    auto backend = CpuBackend::Create(model.config(), model.weights(), options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    *report = (*backend)->weight_cache();
    EXPECT_TRUE((*backend)->AllocateKvCache(16, 4).ok());
    return Generate(**backend, prompt, 4, 5, 4, 0, 8);
  };
  using Outcome = WeightCacheReport::Outcome;
  WeightCacheReport off, written, hit, other;
  int releases = 0;
  const auto plain = run("", "", &off, &releases);
  EXPECT_EQ(off.outcome, Outcome::kOff);
  EXPECT_GE(releases, 1);
  const auto first = run(dir, "weights A", &written, &releases);
  EXPECT_EQ(written.outcome, Outcome::kWritten) << written.detail;
  EXPECT_EQ(written.detail, "absent");
  EXPECT_TRUE(std::filesystem::exists(written.path));
  const auto second = run(dir, "weights A", &hit, &releases);
  EXPECT_EQ(hit.outcome, Outcome::kHit) << hit.detail;
  EXPECT_EQ(hit.path, written.path);
  run(dir, "weights B", &other, &releases);
  EXPECT_EQ(other.outcome, Outcome::kWritten);
  EXPECT_NE(other.path, written.path);
  for (const auto* g : {&first, &second}) {
    EXPECT_EQ(g->prompt_logits, plain.prompt_logits);
    EXPECT_EQ(g->prompt_hidden, plain.prompt_hidden);
    EXPECT_EQ(g->step_logits, plain.step_logits);
    EXPECT_EQ(g->tokens, plain.tokens);
  }
  // A cache folder that cannot be created costs a repack, not the backend.
  WeightCacheReport unwritable;
  const auto fallback = run("/proc/floe-no-such-folder", "weights A", &unwritable, &releases);
  EXPECT_EQ(unwritable.outcome, Outcome::kFailed);
  EXPECT_FALSE(unwritable.detail.empty());
  EXPECT_EQ(fallback.step_logits, plain.step_logits);
  std::filesystem::remove_all(dir);
}

// A tied model reads its embedding from the packed lm_head instead of the
// checkpoint's table: the same rows bit for bit, and the table is not held
// a second time.
TEST(CpuBackendTest, TiedEmbeddingReadFromThePackedLmHead) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    TestModel model(Flavor::kLlama3, dtype, 6);
    ModelConfig config = model.config();
    config.tie_word_embeddings = true;
    ModelWeights tied = model.weights();
    tied.lm_head = tied.embed_tokens;
    // The same values in another buffer: not recognisably tied, read from the table.
    ModelWeights copied = tied;
    std::vector<uint8_t> copy(static_cast<const uint8_t*>(tied.embed_tokens.data),
                              static_cast<const uint8_t*>(tied.embed_tokens.data) + tied.embed_tokens.bytes());
    copied.lm_head.data = copy.data();
    const std::vector<int32_t> prompt = Prompt(17, 6, config.vocab_size);
    auto a = CpuBackend::Create(config, tied, {.num_threads = 2});
    auto b = CpuBackend::Create(config, copied, {.num_threads = 2});
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE((*a)->AllocateKvCache(16, 4).ok());
    ASSERT_TRUE((*b)->AllocateKvCache(16, 4).ok());
    const auto ga = Generate(**a, prompt, 5, 4, 4, 0, 8), gb = Generate(**b, prompt, 5, 4, 4, 0, 8);
    EXPECT_EQ(ga.prompt_logits, gb.prompt_logits) << DTypeName(dtype);
    EXPECT_EQ(ga.step_logits, gb.step_logits) << DTypeName(dtype);
    EXPECT_EQ(ga.tokens, gb.tokens);
    EXPECT_EQ((*b)->WeightBytes() - (*a)->WeightBytes(), tied.embed_tokens.bytes());
  }
}

TEST(CpuBackendTest, RejectsBadInputs) {
  TestModel model(Flavor::kLlama3, DType::kF32, 5);
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
  ASSERT_TRUE(backend.ok());
  Backend& b = **backend;
  const int32_t tokens[] = {1, 2, 3};
  const int32_t table[] = {0};
  ForwardSequence seq{tokens, 0, table, 1};
  std::vector<float> logits(model.config().vocab_size);
  EXPECT_EQ(b.Forward({&seq, 1}, logits.data()).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(b.AllocateKvCache(2, 2).ok());
  EXPECT_EQ(b.Forward({&seq, 1}, logits.data()).code(), absl::StatusCode::kInvalidArgument);  // 1 block < 2 needed
  const int32_t table2[] = {0, 5};
  seq.block_table = table2;
  EXPECT_EQ(b.Forward({&seq, 1}, logits.data()).code(), absl::StatusCode::kInvalidArgument);  // block 5 >= 2
  // Token ids are not checked here: the engine runs only resolved prompts,
  // sampled tokens and range-checked drafts (backend.h).
  const int32_t table3[] = {0, 1};
  seq.block_table = table3;
  seq.num_logits = 4;
  EXPECT_EQ(b.Forward({&seq, 1}, logits.data()).code(), absl::StatusCode::kInvalidArgument);
  seq.num_logits = 1;
  EXPECT_TRUE(b.Forward({&seq, 1}, logits.data()).ok());
  EXPECT_EQ(b.KvBytesPerBlock(4), 2u * 2 * 4 * 2 * 16 * sizeof(float));

  ModelWeights broken = model.weights();
  broken.layers[1].o_proj.shape = {64, 63};
  auto bad_backend = CpuBackend::Create(model.config(), broken, {});
  EXPECT_FALSE(bad_backend.ok());
  EXPECT_NE(bad_backend.status().message().find("layers.1.self_attn.o_proj"), std::string::npos)
      << bad_backend.status();
}

}  // namespace
}  // namespace floe
