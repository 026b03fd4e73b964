// Tensor parallelism on CPU ranks: T ranks (threads here, each its own
// CpuBackend holding its shard, talking over real Gloo TCP on loopback)
// against one rank holding everything. The all-reduces change the order of
// the row-parallel sums, so logits agree within a stated tolerance, not
// bitwise; greedy tokens must be identical wherever one rank's top-2 margin
// exceeds that tolerance (checked at every step: a divergence below it is
// reported, one above fails). Rank 0 drives the others through a
// LeaderBackend, as floe-worker does, and gathers the vocab-parallel logits.
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
#include "services/worker/backend/rank_group.h"
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

// Runs fn(rank, grid) on the T x S ranks of a grid, a thread each,
// connected over Gloo (all of them before any fn starts, so a rank that
// returns early never breaks another's rendezvous).
void OnGrid(int tensor, int sequence, const std::function<void(int, GlooGrid&)>& fn) {
  static std::atomic<int> n{0};
  const fs::path dir = fs::temp_directory_path() / ("floe_tp_" + std::to_string(getpid()) + "_" + std::to_string(n++));
  fs::create_directories(dir);
  const int size = tensor * sequence;
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      auto grid = ConnectGlooGrid({.rank = r, .size = size, .store_dir = dir.string()}, sequence);
      ASSERT_TRUE(grid.ok()) << grid.status();
      ASSERT_TRUE(grid->world->Barrier().ok());
      fn(r, *grid);
    });
  }
  for (auto& t : ranks) t.join();
  fs::remove_all(dir);
}

void OnRanks(int size, const std::function<void(int, Communicator&)>& fn) {
  OnGrid(size, 1, [&](int r, GlooGrid& grid) { fn(r, *grid.world); });
}

absl::StatusOr<std::unique_ptr<CpuBackend>> GridBackend(const TestModel& model, GlooGrid& grid, int sequence,
                                                        cpu::KvDtype kv_dtype = cpu::KvDtype::kF32) {
  return CpuBackend::Create(model.config(), model.weights(),
                            {.num_threads = 1,
                             .communicator = grid.world.get(),
                             .sequence_parallel_size = sequence,
                             .sequence_group = grid.sequence.get(),
                             .tensor_group = grid.tensor.get(),
                             .kv_dtype = kv_dtype});
}

// Rank 0 of a grid drives the others as floe-worker does: a LeaderBackend
// broadcasts each step (its k-th Forward in schedule(k)), the other ranks
// run RunFollower; rank 0 alone gathers the logits (vocab-parallel).
class Scheduled final : public Backend {
 public:
  Scheduled(LeaderBackend& leader, std::function<ParallelMode(int)> schedule)
      : leader_(leader), schedule_(std::move(schedule)) {}
  const ModelConfig& config() const override { return leader_.config(); }
  size_t KvBytesPerBlock(int block_size) const override { return leader_.KvBytesPerBlock(block_size); }
  absl::Status AllocateKvCache(int num_blocks, int block_size) override {
    return leader_.AllocateKvCache(num_blocks, block_size);
  }
  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override {
    const bool sp = schedule_(step_++) == ParallelMode::kSequence;
    leader_.set_policy({sp ? ShiftPolicy::Pin::kSequence : ShiftPolicy::Pin::kTensor});
    return leader_.Forward(batch, logits);
  }
  std::span<const float> LastHiddenStates() const override { return leader_.LastHiddenStates(); }

 private:
  LeaderBackend& leader_;
  std::function<ParallelMode(int)> schedule_;
  int step_ = 0;
};

ParallelMode AlwaysTp(int) { return ParallelMode::kTensor; }
ParallelMode AlwaysSp(int) { return ParallelMode::kSequence; }

// Runs lead(backend) on rank 0 of a T x S grid (its backend wrapped in a
// LeaderBackend) while the other ranks follow it.
void LeadGrid(const TestModel& model, int tensor, int sequence, const std::function<void(LeaderBackend&)>& lead,
              cpu::KvDtype kv_dtype = cpu::KvDtype::kF32) {
  OnGrid(tensor, sequence, [&](int r, GlooGrid& grid) {
    auto backend = GridBackend(model, grid, sequence, kv_dtype);
    ASSERT_TRUE(backend.ok()) << backend.status();
    if (r > 0) {
      const absl::Status s = RunFollower(**backend, *grid.world);
      EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
      return;
    }
    LeaderBackend leader(std::move(backend).value(), *grid.world,
                         [](const absl::Status& s) { ADD_FAILURE() << "rank group failed: " << s; });
    lead(leader);
  });  // the leader tells the followers to stop as it goes
}

// Generates on a T x S grid with the modes of `schedule`.
Generation RunOnGrid(const TestModel& model, int tensor, int sequence, const std::vector<int32_t>& prompt, int steps,
                     int chunk, const std::function<ParallelMode(int)>& schedule,
                     cpu::KvDtype kv_dtype = cpu::KvDtype::kF32) {
  Generation out;
  LeadGrid(
      model, tensor, sequence,
      [&](LeaderBackend& leader) {
        ASSERT_TRUE(leader.AllocateKvCache(64, 4).ok());
        Scheduled scheduled(leader, schedule);
        out = testing_model::Generate(scheduled, prompt, steps, chunk, 4, 0, 64);
      },
      kv_dtype);
  return out;
}

Generation RunOnRanks(const TestModel& model, int size, const std::vector<int32_t>& prompt, int steps, int chunk,
                      bool sequence_parallel = false, cpu::KvDtype kv_dtype = cpu::KvDtype::kF32) {
  return sequence_parallel ? RunOnGrid(model, 1, size, prompt, steps, chunk, AlwaysSp, kv_dtype)
                           : RunOnGrid(model, size, 1, prompt, steps, chunk, AlwaysTp, kv_dtype);
}

// The reference: one rank holding everything, prefill in chunks of 8.
Generation OneRank(const TestModel& model, const std::vector<int32_t>& prompt, int steps,
                   cpu::KvDtype kv_dtype = cpu::KvDtype::kF32) {
  auto one = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1, .kv_dtype = kv_dtype});
  EXPECT_TRUE(one.ok()) << one.status();
  if (!one.ok()) return {};
  EXPECT_TRUE((*one)->AllocateKvCache(64, 4).ok());
  return testing_model::Generate(**one, prompt, steps, 8, 4, 0, 64);
}

// Worst |dlogit| / max|logit| of `got` against one rank's `want`; greedy
// tokens must be equal up to the first flip, and a flip only at a near tie.
double CompareAtTheMargin(const Generation& want, const Generation& got) {
  double worst = 0;
  for (size_t p = 0; p < want.prompt_logits.size(); ++p) {
    if (want.prompt_logits[p].empty()) continue;
    const double scale = MaxAbs(want.prompt_logits[p]);
    for (size_t i = 0; i < want.prompt_logits[p].size(); ++i)
      worst = std::max(worst, std::fabs(want.prompt_logits[p][i] - got.prompt_logits[p][i]) / scale);
  }
  EXPECT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t t = 0; t < std::min(want.tokens.size(), got.tokens.size()); ++t) {
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
  return worst;
}

TEST(TensorParallelTest, LogitsWithinToleranceAndGreedyTokensEqualAtTheMargin) {
  for (Flavor flavor : {Flavor::kLlama3, Flavor::kQwen2, Flavor::kQwen3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      TestModel model(flavor, dtype, 11);
      const int vocab = model.config().vocab_size;
      const std::vector<int32_t> prompt = Prompt(21, vocab);
      const Generation want = OneRank(model, prompt, 24);
      // 2 ranks shard the 2 KV heads; 4 ranks replicate each KV head on two.
      for (int size : {2, 4}) {
        SCOPED_TRACE(::testing::Message() << "flavor " << static_cast<int>(flavor) << " dtype "
                                          << DTypeName(dtype) << " TP " << size);
        const Generation got = RunOnRanks(model, size, prompt, 24, 8);
        const double worst = CompareAtTheMargin(want, got);
        std::printf("TP %d %s: max |dlogit| / max|logit| = %.3g\n", size, DTypeName(dtype), worst);
      }
    }
  }
}

// SwiftKV over ranks: the later layers' KV projection is sharded by KV
// heads like the rest, and the step narrows to its logits rows on every
// rank alike. Prompt chunks ask for the last row's logits only (the engine's
// pattern), so chunks without logits stop after the KV projection. On a TP
// grid, and on an SP grid (SwiftKV steps run in the TP mode there), within
// the TP tolerance of one rank.
TEST(TensorParallelTest, SwiftKVWithinToleranceOfOneRank) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    TestModel model(Flavor::kSwiftKV, dtype, 11, /*vocab=*/512, /*layers=*/4);
    const std::vector<int32_t> prompt = Prompt(21, model.config().vocab_size);
    auto one = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_TRUE((*one)->AllocateKvCache(64, 4).ok());
    const Generation want = testing_model::Generate(**one, prompt, 24, 8, 4, 0, 64, /*last_logits_only=*/true);
    ASSERT_EQ(want.prompt_logits.size(), 1u);
    for (auto grid : {std::pair{2, 1}, std::pair{4, 1}, std::pair{1, 2}}) {
      const int tensor = grid.first, sequence = grid.second;  // named: lambdas capture them
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " grid " << tensor << " x " << sequence);
      Generation got;
      LeadGrid(model, tensor, sequence, [&](LeaderBackend& leader) {
        ASSERT_TRUE(leader.AllocateKvCache(64, 4).ok());
        Scheduled scheduled(leader, sequence > 1 ? AlwaysSp : AlwaysTp);
        got = testing_model::Generate(scheduled, prompt, 24, 8, 4, 0, 64, /*last_logits_only=*/true);
      });
      const double worst = CompareAtTheMargin(want, got);
      std::printf("SwiftKV %d x %d %s: max |dlogit| / max|logit| = %.3g\n", tensor, sequence, DTypeName(dtype), worst);
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
      const Generation want = OneRank(model, prompt, 12);
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

// The same with a bf16 and an fp8 KV cache: each rank rounds its own heads'
// K and V as one rank would, so SP stays bit-identical.
class NarrowKvSequenceParallelTest : public ::testing::TestWithParam<cpu::KvDtype> {};

TEST_P(NarrowKvSequenceParallelTest, BitIdenticalToOneRank) {
  const cpu::KvDtype dtype = GetParam();
  TestModel model(Flavor::kLlama3, DType::kBF16, 13);
  const std::vector<int32_t> prompt = Prompt(21, model.config().vocab_size);
  const Generation want = OneRank(model, prompt, 12, dtype);
  const Generation f32 = OneRank(model, prompt, 12);
  EXPECT_NE(want.prompt_logits, f32.prompt_logits) << "the narrow cache changed nothing: is it used?";
  for (int size : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "SP " << size);
    const Generation got = RunOnRanks(model, size, prompt, 12, 8, /*sequence_parallel=*/true, dtype);
    EXPECT_EQ(got.prompt_logits, want.prompt_logits);
    EXPECT_EQ(got.step_logits, want.step_logits);
    EXPECT_EQ(got.tokens, want.tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, NarrowKvSequenceParallelTest,
                         ::testing::Values(cpu::KvDtype::kBf16, cpu::KvDtype::kFp8E4m3));

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
  for (int size : {2, 4}) {
    std::vector<float> got;
    LeadGrid(model, 1, size, [&](LeaderBackend& leader) {
      ASSERT_TRUE(leader.AllocateKvCache(16, 4).ok());
      leader.set_policy({ShiftPolicy::Pin::kSequence});
      got = run(leader);
    });
    EXPECT_EQ(got, want) << "SP " << size;
  }
  // 3 ranks: 4 heads do not split by 3: refused, naming the numbers.
  auto refused = ShiftRankLayout(model.config(), 0, 1, 3);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
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


// Shift Parallelism on a 2 x 2 grid (T = 2, S = 2; the tiny model's 4 heads
// give each rank one head, its 2 KV heads are replicated on two ranks each).
// The TP mode reads its shard as a slice of the SP x TP shard, so it must
// equal TP over 4 ranks bit for bit; the SP x TP mode runs every row's
// linears with the same TP-2 shard and sums the same two partials, so it
// must equal TP over 2 ranks bit for bit. Both hold for a mixed batch with
// a tree too.
TEST(ShiftGridTest, EachModeEqualsItsPureLayoutBitForBit) {
  for (Flavor flavor : {Flavor::kLlama3, Flavor::kQwen2, Flavor::kQwen3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "flavor " << static_cast<int>(flavor) << " " << DTypeName(dtype));
      TestModel model(flavor, dtype, 19);
      const std::vector<int32_t> prompt = Prompt(21, model.config().vocab_size);
      const Generation tp4 = RunOnGrid(model, 4, 1, prompt, 10, 8, AlwaysTp);
      const Generation tp2 = RunOnGrid(model, 2, 1, prompt, 10, 8, AlwaysTp);
      const Generation grid_tp = RunOnGrid(model, 2, 2, prompt, 10, 8, AlwaysTp);
      const Generation grid_sp = RunOnGrid(model, 2, 2, prompt, 10, 8, AlwaysSp);
      EXPECT_EQ(grid_tp.prompt_logits, tp4.prompt_logits);
      EXPECT_EQ(grid_tp.step_logits, tp4.step_logits);
      EXPECT_EQ(grid_tp.prompt_hidden, tp4.prompt_hidden);
      EXPECT_EQ(grid_sp.prompt_logits, tp2.prompt_logits);
      EXPECT_EQ(grid_sp.step_logits, tp2.step_logits);
      EXPECT_EQ(grid_sp.prompt_hidden, tp2.prompt_hidden);
    }
  }
  TestModel model(Flavor::kQwen2, DType::kBF16, 17);
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> p1 = Prompt(9, vocab), p2 = Prompt(5, vocab), p3 = {1, 2, 3, 4, 5};
  std::vector<int32_t> t1 = {0, 1, 2}, t2 = {3, 4, 5, 6, 7}, t3 = {8, 9, 10, 11};
  std::vector<int32_t> parents = {-1, 0, 0, 1, 1};
  const ForwardSequence seqs[3] = {{p1, 0, t1, 9}, {p2, 0, t2, 1}, {p3, 0, t3, 5, parents}};
  auto run = [&](int tensor, int sequence, ParallelMode mode) {
    std::vector<float> got;
    LeadGrid(model, tensor, sequence, [&](LeaderBackend& leader) {
      ASSERT_TRUE(leader.AllocateKvCache(16, 4).ok());
      leader.set_policy({mode == ParallelMode::kSequence ? ShiftPolicy::Pin::kSequence : ShiftPolicy::Pin::kTensor});
      got.resize(15 * vocab);
      EXPECT_TRUE(leader.Forward(seqs, got.data()).ok());
      auto hidden = leader.LastHiddenStates();
      got.insert(got.end(), hidden.begin(), hidden.end());
    });
    return got;
  };
  EXPECT_EQ(run(2, 2, ParallelMode::kTensor), run(4, 1, ParallelMode::kTensor));
  EXPECT_EQ(run(2, 2, ParallelMode::kSequence), run(2, 1, ParallelMode::kTensor));
}

// Shifting between the modes mid-request (the KV written in one mode is read
// in the other: both keep the same heads on the same rank): a prompt
// prefilled in SP and decoded in TP, and one switching every step, stay
// within the tolerance of one rank, tokens equal at the margin.
TEST(ShiftGridTest, ShiftingMidRequestStaysWithinToleranceOfOneRank) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    TestModel model(Flavor::kLlama3, dtype, 23);
    const std::vector<int32_t> prompt = Prompt(21, model.config().vocab_size);
    const Generation want = OneRank(model, prompt, 20);
    // 21 prompt tokens in chunks of 8: forwards 0-2 are the prefill.
    const std::pair<const char*, std::function<ParallelMode(int)>> schedules[] = {
        {"prefill SP, decode TP", [](int k) { return k < 3 ? ParallelMode::kSequence : ParallelMode::kTensor; }},
        {"every step", [](int k) { return k % 2 ? ParallelMode::kSequence : ParallelMode::kTensor; }},
        {"prefill TP, decode SP", [](int k) { return k < 3 ? ParallelMode::kTensor : ParallelMode::kSequence; }}};
    for (const auto& [name, schedule] : schedules) {
      SCOPED_TRACE(::testing::Message() << name << " " << DTypeName(dtype));
      const Generation got = RunOnGrid(model, 2, 2, prompt, 20, 8, schedule);
      const double worst = CompareAtTheMargin(want, got);
      std::printf("shift 2x2 %s, %s: max |dlogit| / max|logit| = %.3g\n", name, DTypeName(dtype), worst);
    }
  }
}

// The weights are held once: a grid rank holds its SP x TP shard and
// nothing more for the TP mode (Arctic's layout holds both: x (1 + 1/S)).
TEST(ShiftGridTest, WeightsAreHeldOnce) {
  TestModel model(Flavor::kLlama3, DType::kBF16, 3);
  size_t tp2 = 0, tp4 = 0, grid = 0;
  OnGrid(2, 1, [&](int r, GlooGrid& g) {
    auto b = GridBackend(model, g, 1);
    if (r == 0) tp2 = (*b)->WeightBytes();
  });
  OnGrid(4, 1, [&](int r, GlooGrid& g) {
    auto b = GridBackend(model, g, 1);
    if (r == 0) tp4 = (*b)->WeightBytes();
  });
  OnGrid(2, 2, [&](int r, GlooGrid& g) {
    auto b = GridBackend(model, g, 2);
    if (r == 0) grid = (*b)->WeightBytes();
  });
  std::printf("weight bytes per rank: TP2 %zu, TP4 %zu, grid 2x2 %zu (Arctic's layout: %zu)\n", tp2, tp4, grid,
              tp2 + tp4);
  EXPECT_GE(grid, tp2);
  // Over TP2's shard: only the KV rows two ranks of a group share (KV heads
  // < ranks) and panel padding; a small part of the second copy Arctic keeps.
  EXPECT_LT(grid - tp2, tp4 / 4);
}

TEST(ShiftGridTest, LayoutFollowsTheTransposedGrid) {
  TestModel model(Flavor::kLlama3, DType::kF32, 1);  // 4 heads, 2 KV heads, intermediate 128
  for (int w = 0; w < 4; ++w) {
    auto l = ShiftRankLayout(model.config(), w, 2, 2);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->tp_rank(), w / 2);
    EXPECT_EQ(l->sp_rank(), w % 2);
    EXPECT_EQ(l->heads.q_head_begin, w);  // the same head in both modes
    EXPECT_EQ(l->heads.kv_head_begin, w / 2);
    ASSERT_EQ(l->group.size(), 2u);
    EXPECT_EQ(l->group[0].q_head_begin, 2 * (w / 2));  // weights held: its SP group's heads
    EXPECT_EQ(l->group[1].q_head_end, 2 * (w / 2) + 2);
  }
  ModelConfig narrow = model.config();
  narrow.head_dim = 8;
  narrow.hidden_size = 32;
  auto refused = ShiftRankLayout(narrow, 0, 2, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("head_dim 8"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace floe
