#include "services/worker/engine/draft_budget.h"

#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace floe {
namespace {

// Drafts of `length` whose tokens are each accepted with probability `rate`
// (given the previous ones were), `count` times.
DraftAcceptanceStats StatsWith(int k, double rate, int count = 400, int length = 16) {
  DraftAcceptanceStats stats(k);
  std::mt19937 rng(1);
  std::bernoulli_distribution accept(rate);
  for (int i = 0; i < count; ++i) {
    int a = 0;
    while (a < length && accept(rng)) ++a;
    stats.Record(length, a);
  }
  return stats;
}

int Total(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

TEST(DraftBudgetTest, OptimisticUntilMeasuredThenFollowsAcceptance) {
  DraftAcceptanceStats fresh(16);
  EXPECT_EQ(fresh.Cumulative(0), 1.0);
  const std::vector<int> caps = {16};
  EXPECT_EQ(PlanDraftLengths(1, 1, caps, fresh, {}), std::vector<int>{16});

  DraftAcceptanceStats rejected = StatsWith(16, 0.0);
  EXPECT_EQ(rejected.Cumulative(0), 0.0);
  EXPECT_EQ(PlanDraftLengths(1, 1, caps, rejected, {}), std::vector<int>{0});
  // Without the cost model only the threshold limits drafts.
  EXPECT_EQ(PlanDraftLengths(1, 1, caps, rejected, {.threshold = 10, .step_overhead_tokens = -1}), std::vector<int>{9});
}

TEST(DraftBudgetTest, DraftsShrinkWithLoadAndLowAcceptance) {
  const DraftAcceptanceStats agentic = StatsWith(16, 0.95), chat = StatsWith(16, 0.35);
  const DraftCostModel cpu{.threshold = 64, .step_overhead_tokens = 3};
  std::vector<int> one = {16}, sixteen(16, 16);
  const int agentic_alone = Total(PlanDraftLengths(1, 1, one, agentic, cpu));
  const int chat_alone = Total(PlanDraftLengths(1, 1, one, chat, cpu));
  EXPECT_GE(agentic_alone, 8);
  EXPECT_GE(chat_alone, 1);
  EXPECT_LT(chat_alone, agentic_alone);
  // At batch 16 a chat-like draft never pays: P_0 = 0.35 < 16 / (3 + 16).
  EXPECT_EQ(Total(PlanDraftLengths(16, 16, sixteen, chat, cpu)), 0);
  const int agentic_loaded = Total(PlanDraftLengths(16, 16, sixteen, agentic, cpu));
  EXPECT_GT(agentic_loaded, 0);
  EXPECT_LT(agentic_loaded, 16 * agentic_alone);
  // The hard threshold: never more than threshold - T draft tokens.
  EXPECT_LE(Total(PlanDraftLengths(50, 16, sixteen, agentic, cpu)), 14);
  EXPECT_EQ(Total(PlanDraftLengths(64, 16, sixteen, agentic, cpu)), 0);
}

// The plan maximizes the step's expected tokens per unit of cost, E / (R + N),
// over position-major allocations: checked against brute force.
TEST(DraftBudgetTest, MatchesBruteForceThroughputOptimum) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int k = 1 + static_cast<int>(rng() % 12);
    const DraftAcceptanceStats stats = StatsWith(k, 0.05 + 0.9 * (rng() % 1000) / 1000.0, 300, k);
    const int batch = 1 + static_cast<int>(rng() % 8);
    std::vector<int> caps(batch);
    for (int& c : caps) c = static_cast<int>(rng() % (k + 1));
    const int64_t step_tokens = batch + static_cast<int64_t>(rng() % 3) * 7;  // some prefill too
    const DraftCostModel model{.threshold = 1 << 20, .step_overhead_tokens = 0.5 + (rng() % 80) / 10.0};
    // Position-major order of draft tokens, then the best prefix of it.
    std::vector<double> order;
    for (int j = 0; j < k; ++j)
      for (int c : caps)
        if (c > j) order.push_back(stats.Cumulative(j));
    double best = batch / (model.step_overhead_tokens + step_tokens);
    size_t best_m = 0;
    double e = batch, n = static_cast<double>(step_tokens);
    for (size_t m = 1; m <= order.size(); ++m) {
      e += order[m - 1];
      n += 1;
      if (e / (model.step_overhead_tokens + n) > best + 1e-12) {
        best = e / (model.step_overhead_tokens + n);
        best_m = m;
      }
    }
    EXPECT_EQ(static_cast<size_t>(Total(PlanDraftLengths(step_tokens, batch, caps, stats, model))), best_m)
        << "trial " << trial;
  }
}

TEST(DraftBudgetTest, WindowForgetsSoUndraftedPositionsAreRetried) {
  DraftAcceptanceStats stats(4, /*window=*/64);
  for (int i = 0; i < 40; ++i) stats.Record(4, 0);
  EXPECT_EQ(stats.Cumulative(3), 0.0);
  // From now on only 1-token drafts (later positions too costly to try).
  for (int i = 0; i < 400; ++i) stats.Record(1, 1);
  EXPECT_GT(stats.Cumulative(0), 0.99);
  EXPECT_GT(stats.Cumulative(3), 0.99) << "position 3's old evidence has decayed below kMinSamples";
}

// Switched off, position 0 gets no drafts and so no new evidence: after
// idle_tokens emitted tokens without a draft the counts halve, until the prior
// lets a step probe again; a workload that became draftable is then measured
// and keeps its drafts. Tokens emitted while drafting do not age the stats.
TEST(DraftBudgetTest, SwitchedOffDraftsAreProbedAgainAfterIdleTokens) {
  DraftAcceptanceStats stats(4, /*window=*/4096, /*idle_tokens=*/1000);
  for (int i = 0; i < 40; ++i) stats.Record(4, 0);
  const std::vector<int> caps = {4, 4};
  ASSERT_EQ(PlanDraftLengths(2, 2, caps, stats, {}), (std::vector<int>{0, 0}));
  stats.Age(999);
  EXPECT_EQ(PlanDraftLengths(2, 2, caps, stats, {}), (std::vector<int>{0, 0})) << "aged before idle_tokens";
  stats.Age(1);  // 40 -> 20 drafts of evidence: still measured
  EXPECT_EQ(stats.Cumulative(0), 0.0);
  stats.Age(1000);  // 20 -> 10 < kMinSamples: the optimistic prior again
  EXPECT_EQ(stats.Cumulative(0), 1.0);
  EXPECT_GT(Total(PlanDraftLengths(2, 2, caps, stats, {})), 0);
  // The probe finds drafts accepted now; they stay on.
  for (int i = 0; i < 40; ++i) {
    stats.Record(4, 4);
    stats.Age(5);
  }
  EXPECT_GT(stats.Cumulative(3), 0.7);
  EXPECT_EQ(PlanDraftLengths(2, 2, caps, stats, {}), (std::vector<int>{4, 4}));
  // Drafting resets the idle count: 40 steps of 5 tokens never halved them.
  stats.Age(999);
  EXPECT_GT(stats.Cumulative(3), 0.7);
}

}  // namespace
}  // namespace floe
