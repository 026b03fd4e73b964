#include "services/worker/engine/draft_budget.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>

#include "gtest/gtest.h"
#include "services/worker/engine/draft_selector.h"

namespace floe {
namespace {

int Total(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

// The CPU backend's shape at Llama-3.2-1B (bench_verify_cost): flat while
// the weights stream, then linear in the tokens run.
StepCostCurve CpuLike() {
  return *StepCostCurve::FromPoints({{1, 70}, {2, 71}, {4, 73}, {8, 80}, {16, 130}, {32, 230}, {64, 430}});
}

TEST(StepCostCurveTest, InterpolatesAndExtrapolatesTheLastSlope) {
  const StepCostCurve curve = CpuLike();
  EXPECT_DOUBLE_EQ(curve.Time(1), 70);
  EXPECT_DOUBLE_EQ(curve.Time(0), 70);
  EXPECT_DOUBLE_EQ(curve.Time(3), 72);
  EXPECT_DOUBLE_EQ(curve.Time(24), 180);
  EXPECT_DOUBLE_EQ(curve.Time(128), 430 + 64 * 200.0 / 32);
  const StepCostCurve line = StepCostCurve::Linear(3);
  EXPECT_DOUBLE_EQ(line.Time(1), 4);
  EXPECT_DOUBLE_EQ(line.Time(100), 103);
}

TEST(StepCostCurveTest, RejectsBadPointsAndFilesNamingTheProblem) {
  EXPECT_FALSE(StepCostCurve::FromPoints({}).ok());
  EXPECT_FALSE(StepCostCurve::FromPoints({{0, 1.0}}).ok());
  EXPECT_FALSE(StepCostCurve::FromPoints({{1, -1.0}}).ok());
  EXPECT_FALSE(StepCostCurve::FromPoints({{4, 1.0}, {2, 2.0}}).ok());
  EXPECT_FALSE(StepCostCurve::FromPoints({{1, NAN}}).ok());
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/curve_good.json", bad = dir + "/curve_bad.json";
  std::ofstream(good) << CpuLike().ToJson();
  auto loaded = StepCostCurve::Load(good);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->points(), CpuLike().points());
  std::ofstream(bad) << R"({"step_cost_curve": [[1, "fast"]]})";
  auto refused = StepCostCurve::Load(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("[tokens, ms]"), std::string::npos) << refused.status();
  EXPECT_EQ(StepCostCurve::Load(dir + "/missing.json").status().code(), absl::StatusCode::kNotFound);
}

// A scoring proposer's claims earn a factor per namespace and band of
// offered length: (accepted + 4 * above) / (claimed + 4), at most 1, the
// namespace's above all requests', theirs above 1. A claim at rate c over
// n verified tokens is c + c^2 + ... + c^n tokens.
TEST(ClaimCalibrationTest, PerNamespaceAndLengthBandShrunkTowardsAllRequests) {
  AcceptanceRateSelector rates(/*num_proposers=*/1);
  Sequence chat, agent;
  chat.request.speculation.ns = "chat";
  agent.request.speculation.ns = "agent";
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 1), 1.0) << "nothing measured: claims are believed";
  // 10 one-token drafts claimed at rate 1, 3 accepted.
  for (int i = 0; i < 10; ++i)
    rates.RecordClaim(chat, 0, /*offered=*/1, /*claimed_rate=*/1.0, /*drafted=*/1, /*accepted=*/i < 3 ? 1 : 0);
  const double global = (3 + 4.0) / (10 + 4);  // 0.5
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 1), (3 + 4 * global) / (10 + 4));
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(agent, 0, 1), global) << "another namespace starts from all requests'";
  // Bands: 1 | 2-3 | 4-7 | 8+ offered tokens.
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 2), 1.0);
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 32), 1.0);
  // Offered 3, cut to 2 by the plan, claimed at 0.5: 0.5 + 0.25 tokens.
  rates.RecordClaim(chat, 0, 3, 0.5, 2, 0);
  const double global_band1 = 4.0 / (0.75 + 4);
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 2), 4 * global_band1 / (0.75 + 4));
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 2), rates.ClaimCalibration(chat, 0, 3));
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 4), 1.0);
  // Claims that delivered more than they said are not inflated.
  rates.RecordClaim(agent, 0, 16, 0.5, 16, 16);
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(agent, 0, 16), 1.0);
  // Out-of-range proposers and bad claims change nothing.
  rates.RecordClaim(chat, 5, 1, 1.0, 1, 0);
  rates.RecordClaim(chat, 0, 1, -1, 1, 0);
  rates.RecordClaim(chat, 0, 1, 2.0, 1, 0);
  rates.RecordClaim(chat, 0, 1, 1.0, 0, 0);
  rates.RecordClaim(chat, 0, 1, 1.0, 1, 2);
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 0, 1), (3 + 4 * global) / (10 + 4));
  EXPECT_DOUBLE_EQ(rates.ClaimCalibration(chat, 5, 1), 1.0);
}

// An agent session that copies at 0.95 keeps long drafts while chat requests
// beside it in the same batch (0.35) draft nothing; alone, chat drafts a little.
TEST(DraftBudgetTest, PerRequestRatesSplitOneBatch) {
  const DraftCostModel cpu{.threshold = 1 << 20, .enabled = true, .curve = CpuLike()};
  std::vector<int> caps(16, 32);
  std::vector<double> rates(16, 0.35);
  rates[3] = 0.95;
  const std::vector<int> lengths = PlanDraftLengths(16, 16, caps, rates, cpu);
  EXPECT_GT(lengths[3], 0);
  EXPECT_EQ(Total(lengths), lengths[3]) << "only the agent drafts";
  // Alone on a flat curve, an agent drafts until the curve turns linear.
  const std::vector<int> one = {32};
  EXPECT_GE(PlanDraftLengths(1, 1, one, std::vector<double>{0.95}, cpu)[0], 7);
  EXPECT_GT(PlanDraftLengths(1, 1, one, std::vector<double>{0.35}, cpu)[0], 0);
  // Never anything at rate 0; drafts shrink as the batch grows.
  EXPECT_EQ(PlanDraftLengths(1, 1, one, std::vector<double>{0.0}, cpu)[0], 0);
  const std::vector<double> agents(16, 0.95);
  const std::vector<int> four(4, 32);
  EXPECT_GT(Total(PlanDraftLengths(4, 4, four, std::vector<double>(4, 0.95), cpu)) / 4.0,
            Total(PlanDraftLengths(16, 16, caps, agents, cpu)) / 16.0);
}

TEST(DraftBudgetTest, ThresholdCapsAndCostModelOff) {
  const std::vector<int> caps = {16, 16};
  const std::vector<double> rates = {0.0, 0.0};
  DraftCostModel off{.threshold = 12, .enabled = false};
  EXPECT_EQ(Total(PlanDraftLengths(2, 2, caps, rates, off)), 10) << "threshold only";
  DraftCostModel on{.threshold = 12, .enabled = true, .curve = StepCostCurve::Linear(1)};
  EXPECT_EQ(Total(PlanDraftLengths(2, 2, caps, rates, on)), 0);
  EXPECT_EQ(Total(PlanDraftLengths(12, 2, caps, std::vector<double>{1.0, 1.0}, on)), 0) << "at the threshold";
  EXPECT_EQ(Total(PlanDraftLengths(2, 2, caps, std::vector<double>{1.0, 1.0}, on)), 10);
}

// The plan maximizes expected emitted tokens per unit of step time over every
// allocation of draft tokens (each sequence's a prefix of its cap), on
// random curves, convex or not: checked against brute force.
TEST(DraftBudgetTest, MatchesBruteForceThroughputOptimum) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int batch = 1 + static_cast<int>(rng() % 4);
    std::vector<int> caps(batch);
    std::vector<double> rates(batch);
    for (int i = 0; i < batch; ++i) {
      caps[i] = static_cast<int>(rng() % 6);
      rates[i] = (rng() % 1001) / 1000.0;
    }
    const int64_t step_tokens = batch + static_cast<int64_t>(rng() % 3) * 7;  // some prefill too
    std::vector<std::pair<int, double>> points;
    double t = 1 + rng() % 50;
    for (int n = 1; n <= 40; n += 1 + static_cast<int>(rng() % 6)) {
      points.emplace_back(n, t);
      t += (rng() % 3 == 0) ? (rng() % 40) : (rng() % 4);  // flat stretches and jumps
    }
    const DraftCostModel model{.threshold = 1 << 20, .enabled = true, .curve = *StepCostCurve::FromPoints(points)};
    auto value = [&](const std::vector<int>& lengths) {
      double e = batch;
      int64_t n = step_tokens;
      for (int i = 0; i < batch; ++i) {
        double p = 1;
        for (int j = 0; j < lengths[i]; ++j) e += (p *= rates[i]);
        n += lengths[i];
      }
      return e / model.curve.Time(n);
    };
    double best = 0;
    std::vector<int> lengths(batch, 0);
    std::function<void(int)> search = [&](int i) {
      if (i == batch) {
        best = std::max(best, value(lengths));
        return;
      }
      for (lengths[i] = 0; lengths[i] <= caps[i]; ++lengths[i]) search(i + 1);
      lengths[i] = 0;
    };
    search(0);
    const std::vector<int> plan = PlanDraftLengths(step_tokens, batch, caps, rates, model);
    for (int i = 0; i < batch; ++i) ASSERT_LE(plan[i], caps[i]);
    EXPECT_NEAR(value(plan), best, best * 1e-9) << "trial " << trial;
  }
}

}  // namespace
}  // namespace floe
