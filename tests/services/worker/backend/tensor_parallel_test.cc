// Tensor parallelism on CPU ranks: T ranks (threads here, each its own
// CpuBackend holding its shard, talking over real Gloo TCP on loopback)
// against one rank holding everything. The all-reduces change the order of
// the row-parallel sums, so logits agree within a stated tolerance, not
// bitwise; greedy tokens must be identical wherever one rank's top-2 margin
// exceeds that tolerance (checked at every step: a divergence below it is
// reported, one above fails). Every rank computes the same logits (the
// all-reduce hands every rank the same sums), bit for bit.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/parallel_layout.h"
#include "services/worker/parallel/gloo_communicator.h"
#include "tests/services/worker/backend/test_model.h"

namespace floe {
namespace {

namespace fs = std::filesystem;
using testing_model::Flavor;
using testing_model::Generation;
using testing_model::TestModel;

// |Δlogit| bound relative to the largest |logit|: f32 sums of <= 128 terms in
// another order (measured: see the test's output).
constexpr double kRelativeTolerance = 1e-4;

std::vector<int32_t> Prompt(int n, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (17 + i * 53) % vocab;
  return p;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Top-2 margin of a logits row.
double Margin(const std::vector<float>& v) {
  std::vector<float> s = v;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  return s[0] - s[1];
}

// Runs fn(rank, communicator) on `size` ranks, a thread each, connected
// over Gloo (all of them before any fn starts, so a rank that returns early
// never breaks another's rendezvous).
void OnRanks(int size, const std::function<void(int, Communicator&)>& fn) {
  static std::atomic<int> n{0};
  const fs::path dir = fs::temp_directory_path() / ("floe_tp_" + std::to_string(getpid()) + "_" + std::to_string(n++));
  fs::create_directories(dir);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      auto comm = GlooCommunicator::Connect({.rank = r, .size = size, .store_dir = dir.string()});
      ASSERT_TRUE(comm.ok()) << comm.status();
      ASSERT_TRUE((*comm)->Barrier().ok());
      fn(r, **comm);
    });
  }
  for (auto& t : ranks) t.join();
  fs::remove_all(dir);
}

Generation RunOnRanks(const TestModel& model, int size, const std::vector<int32_t>& prompt, int steps,
                      int chunk, bool sequence_parallel = false) {
  std::vector<Generation> out(size);
  OnRanks(size, [&](int r, Communicator& comm) {
    auto backend = CpuBackend::Create(
        model.config(), model.weights(),
        {.num_threads = 1, .communicator = &comm, .sequence_parallel = sequence_parallel});
    ASSERT_TRUE(backend.ok()) << backend.status();
    ASSERT_TRUE((*backend)->AllocateKvCache(64, 4).ok());
    out[r] = testing_model::Generate(**backend, prompt, steps, chunk, 4, 0, 64);
  });
  for (int r = 1; r < size; ++r) {
    EXPECT_EQ(out[r].step_logits, out[0].step_logits) << "rank " << r << " differs from rank 0";
    EXPECT_EQ(out[r].tokens, out[0].tokens);
  }
  return out[0];
}

TEST(TensorParallelTest, LogitsWithinToleranceAndGreedyTokensEqualAtTheMargin) {
  for (Flavor flavor : {Flavor::kLlama3, Flavor::kQwen2, Flavor::kQwen3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      TestModel model(flavor, dtype, 11);
      const int vocab = model.config().vocab_size;
      const std::vector<int32_t> prompt = Prompt(21, vocab);
      auto one = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
      ASSERT_TRUE(one.ok());
      ASSERT_TRUE((*one)->AllocateKvCache(64, 4).ok());
      const Generation want = testing_model::Generate(**one, prompt, 24, 8, 4, 0, 64);
      // 2 ranks shard the 2 KV heads; 4 ranks replicate each KV head on two.
      for (int size : {2, 4}) {
        SCOPED_TRACE(::testing::Message() << "flavor " << static_cast<int>(flavor) << " dtype "
                                          << DTypeName(dtype) << " TP " << size);
        const Generation got = RunOnRanks(model, size, prompt, 24, 8);
        double worst = 0;
        for (size_t p = 0; p < want.prompt_logits.size(); ++p) {
          if (want.prompt_logits[p].empty()) continue;
          const double scale = MaxAbs(want.prompt_logits[p]);
          for (size_t i = 0; i < want.prompt_logits[p].size(); ++i)
            worst = std::max(worst, std::fabs(want.prompt_logits[p][i] - got.prompt_logits[p][i]) / scale);
        }
        ASSERT_EQ(got.tokens.size(), want.tokens.size());
        for (size_t t = 0; t < want.tokens.size(); ++t) {
          const double scale = MaxAbs(want.step_logits[t]);
          for (size_t i = 0; i < want.step_logits[t].size(); ++i)
            worst = std::max(worst, std::fabs(want.step_logits[t][i] - got.step_logits[t][i]) / scale);
          if (got.tokens[t] != want.tokens[t]) {
            // Only a near tie may flip; past it the contexts differ, so stop comparing.
            EXPECT_LT(Margin(want.step_logits[t]), 2 * kRelativeTolerance * scale) << "step " << t;
            break;
          }
        }
        EXPECT_LE(worst, kRelativeTolerance);
        std::printf("TP %d %s: max |dlogit| / max|logit| = %.3g\n", size, DTypeName(dtype), worst);
      }
    }
  }
}

// Ulysses SP (T = 1): every linear runs on a rank's rows with the full
// weights, attention on its heads over every row; every kernel is
// batch-invariant, so the logits and hidden states equal one rank's bit for
// bit, for chunked prefill, decode (1 row: a rank with no rows), and a
// batch mixing a prefill, a decode and a tree verify.
TEST(SequenceParallelTest, BitIdenticalToOneRank) {
  for (Flavor flavor : {Flavor::kLlama3, Flavor::kQwen2, Flavor::kQwen3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      TestModel model(flavor, dtype, 13);
      const int vocab = model.config().vocab_size;
      const std::vector<int32_t> prompt = Prompt(21, vocab);
      auto one = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
      ASSERT_TRUE(one.ok());
      ASSERT_TRUE((*one)->AllocateKvCache(64, 4).ok());
      const Generation want = testing_model::Generate(**one, prompt, 12, 8, 4, 0, 64);
      for (int size : {2, 4}) {
        SCOPED_TRACE(::testing::Message() << "flavor " << static_cast<int>(flavor) << " " << DTypeName(dtype)
                                          << " SP " << size);
        const Generation got = RunOnRanks(model, size, prompt, 12, 8, /*sequence_parallel=*/true);
        EXPECT_EQ(got.prompt_logits, want.prompt_logits);
        EXPECT_EQ(got.prompt_hidden, want.prompt_hidden);
        EXPECT_EQ(got.step_logits, want.step_logits);
        EXPECT_EQ(got.tokens, want.tokens);
      }
    }
  }
}

TEST(SequenceParallelTest, MixedBatchWithATreeIsBitIdentical) {
  TestModel model(Flavor::kQwen2, DType::kBF16, 17);
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> p1 = Prompt(9, vocab), p2 = Prompt(5, vocab), p3 = {1, 2, 3, 4, 5};
  std::vector<int32_t> t1 = {0, 1, 2}, t2 = {3, 4, 5, 6, 7}, t3 = {8, 9, 10, 11};
  std::vector<int32_t> parents = {-1, 0, 0, 1, 1};
  const ForwardSequence seqs[3] = {{p1, 0, t1, 9}, {p2, 0, t2, 1}, {p3, 0, t3, 5, parents}};
  auto run = [&](Backend& b) {
    std::vector<float> logits(15 * vocab);
    EXPECT_TRUE(b.Forward(seqs, logits.data()).ok());
    auto hidden = b.LastHiddenStates();
    logits.insert(logits.end(), hidden.begin(), hidden.end());
    return logits;
  };
  auto one = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE((*one)->AllocateKvCache(16, 4).ok());
  const std::vector<float> want = run(**one);
  for (int size : {2, 3}) {  // 3 ranks: 19 rows split 6/6/7, heads 4 do not split by 3: refused
    std::vector<std::vector<float>> got(size);
    std::vector<absl::Status> created(size);
    OnRanks(size, [&](int r, Communicator& comm) {
      auto b = CpuBackend::Create(model.config(), model.weights(),
                                  {.num_threads = 1, .communicator = &comm, .sequence_parallel = true});
      created[r] = b.status();
      if (!b.ok()) return;
      ASSERT_TRUE((*b)->AllocateKvCache(16, 4).ok());
      got[r] = run(**b);
    });
    if (size == 3) {
      EXPECT_EQ(created[0].code(), absl::StatusCode::kInvalidArgument) << created[0];
      continue;
    }
    for (int r = 0; r < size; ++r) EXPECT_EQ(got[r], want) << "rank " << r;
  }
}

// A rank that goes away fails the step on the others, within the deadline,
// instead of returning logits built from half the sums.
TEST(TensorParallelTest, ARankThatGoesAwayFailsTheStep) {
  TestModel model(Flavor::kLlama3, DType::kF32, 5);
  const fs::path dir = fs::temp_directory_path() / ("floe_tp_gone_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const GlooOptions base{.size = 2, .store_dir = dir.string(), .timeout = std::chrono::seconds(3)};
  std::thread gone([&] {
    GlooOptions o = base;
    o.rank = 1;
    auto comm = GlooCommunicator::Connect(o);
    ASSERT_TRUE(comm.ok()) << comm.status();
    ASSERT_TRUE((*comm)->Barrier().ok());
  });  // its communicator closes here, before any step
  GlooOptions o = base;
  o.rank = 0;
  auto comm = GlooCommunicator::Connect(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE((*comm)->Barrier().ok());
  gone.join();
  auto backend = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1, .communicator = comm->get()});
  ASSERT_TRUE(backend.ok());
  ASSERT_TRUE((*backend)->AllocateKvCache(8, 4).ok());
  const std::vector<int32_t> tokens = {1, 2, 3}, table = {0};
  const ForwardSequence seq{tokens, 0, table, 1};
  std::vector<float> logits(model.config().vocab_size);
  const absl::Status s = (*backend)->Forward({&seq, 1}, logits.data());
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE((*backend)->LastHiddenStates().empty());
  fs::remove_all(dir);
}

TEST(TensorParallelTest, ImpossibleLayoutsFailNamingTheNumbers) {
  TestModel model(Flavor::kLlama3, DType::kF32, 1);  // 4 heads, 2 KV heads, intermediate 128
  auto three = TensorParallelLayout(model.config(), 0, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("3 does not divide the model's 4 attention heads"), std::string::npos)
      << three.status();
  ModelConfig odd_kv = model.config();
  odd_kv.num_heads = 12;
  odd_kv.num_kv_heads = 3;
  auto four = TensorParallelLayout(odd_kv, 0, 4);
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.status().message().find("3 KV heads"), std::string::npos) << four.status();
  // 4 ranks over 2 KV heads: ranks 0-1 read KV head 0, ranks 2-3 KV head 1.
  for (int r = 0; r < 4; ++r) {
    auto l = TensorParallelLayout(model.config(), r, 4);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->q_head_begin, r);
    EXPECT_EQ(l->kv_head_begin, r / 2);
    EXPECT_EQ(l->num_kv_heads(), 1);
    EXPECT_EQ(l->intermediate(), 32);
  }
}

}  // namespace
}  // namespace floe
