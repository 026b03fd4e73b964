#include "services/worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/sampling/counter_rng.h"

namespace floe {
namespace {

int32_t Draw(const SamplingOptions& options, std::vector<float> logits, int64_t position = 0,
             std::vector<int32_t> output = {}, std::vector<int32_t> banned = {}) {
  SamplingContext context;
  context.output_tokens = output;
  context.output_position = position;
  context.banned_tokens = banned;
  return Sampler::Sample(options, context, logits);
}

// The distribution the stages should produce, computed the slow obvious way.
std::vector<double> OracleDistribution(const SamplingOptions& o, const std::vector<float>& logits) {
  const size_t n = logits.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> p(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += p[i] = std::exp((logits[i] - logits[order[0]]) / o.temperature);
  for (double& v : p) v /= total;
  std::vector<bool> keep(n, true);
  size_t k = o.top_k > 0 ? std::min<size_t>(o.top_k, n) : n;
  for (size_t r = k; r < n; ++r) keep[order[r]] = false;
  double kept = 0;
  for (size_t r = 0; r < k; ++r) kept += p[order[r]];
  double cumulative = 0;
  bool reached = false;
  for (size_t r = 0; r < k; ++r) {
    if (reached) keep[order[r]] = false;
    cumulative += p[order[r]] / kept;
    if (cumulative >= o.top_p) reached = true;
    if (p[order[r]] < o.min_p * p[order[0]]) keep[order[r]] = false;
  }
  std::vector<double> q(n, 0.0);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) if (keep[i]) sum += q[i] = p[i];
  for (double& v : q) v /= sum;
  return q;
}

TEST(SamplerTest, GreedyTakesArgMaxLowestIdOnTies) {
  SamplingOptions greedy;
  EXPECT_EQ(Draw(greedy, {0.1f, 3.0f, 3.0f, -1.0f}), 1);
  EXPECT_EQ(Draw(greedy, {0.1f, 3.0f, 3.0f, -1.0f}, 0, {}, {1}), 2);  // banned
}

TEST(SamplerTest, PenaltiesFollowVllmSemantics) {
  SamplingOptions o;
  o.repetition_penalty = 2.0f;
  // Token 0 was generated: 4.0 -> 2.0 loses to token 1 (3.0).
  EXPECT_EQ(Draw(o, {4.0f, 3.0f}, 0, {0}), 1);
  SamplingOptions f;
  f.frequency_penalty = 0.6f;
  // Token 0 seen twice: 4.0 - 1.2 = 2.8 < 3.0.
  EXPECT_EQ(Draw(f, {4.0f, 3.0f}, 0, {0, 0}), 1);
  EXPECT_EQ(Draw(f, {4.0f, 3.0f}, 0, {0}), 0);
}

TEST(SamplerTest, SeededDrawDependsOnlyOnSeedAndPosition) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 1234;
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  for (int pos = 0; pos < 20; ++pos) EXPECT_EQ(Draw(o, logits, pos), Draw(o, logits, pos));
  int differ = 0;
  for (int pos = 0; pos < 20; ++pos) differ += Draw(o, logits, pos) != Draw(o, logits, pos + 1);
  EXPECT_GT(differ, 10);
}

struct DistributionCase {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

class SamplerDistributionTest : public testing::TestWithParam<DistributionCase> {};

// Empirical frequencies over many positions match the oracle distribution.
TEST_P(SamplerDistributionTest, MatchesOracle) {
  const DistributionCase c = GetParam();
  SamplingOptions o;
  o.temperature = c.temperature;
  o.top_k = c.top_k;
  o.top_p = c.top_p;
  o.min_p = c.min_p;
  o.seed = 99;
  std::vector<float> logits(300);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 3.0f * std::cos(0.37f * static_cast<float>(i)) + 0.001f * static_cast<float>(i);
  std::vector<double> expected = OracleDistribution(o, logits);
  constexpr int kDraws = 40000;
  std::vector<int> counts(logits.size(), 0);
  for (int pos = 0; pos < kDraws; ++pos) ++counts[Draw(o, logits, pos)];
  for (size_t i = 0; i < logits.size(); ++i) {
    double p = expected[i];
    if (p == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " should be truncated";
      continue;
    }
    double sd = std::sqrt(kDraws * p * (1 - p));
    EXPECT_NEAR(counts[i], kDraws * p, 5 * sd + 3) << "token " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, SamplerDistributionTest,
                         testing::Values(DistributionCase{1.0f, 0, 1.0f, 0.0f},
                                         DistributionCase{0.7f, 0, 1.0f, 0.0f},
                                         DistributionCase{1.0f, 5, 1.0f, 0.0f},
                                         DistributionCase{1.0f, 0, 0.9f, 0.0f},
                                         DistributionCase{1.3f, 0, 0.5f, 0.0f},
                                         DistributionCase{1.0f, 0, 1.0f, 0.2f},
                                         DistributionCase{0.9f, 40, 0.8f, 0.05f}));

TEST(SamplerTest, LogprobsAreLogSoftmax) {
  std::vector<float> logits = {1.0f, 2.0f, 0.5f};
  TopLogprobs lp = Sampler::ComputeLogprobs(logits, 0, 2);
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(0.5);
  EXPECT_NEAR(lp.sampled_logprob, 1.0 - std::log(z), 1e-5);
  ASSERT_EQ(lp.ids.size(), 2u);
  EXPECT_EQ(lp.ids[0], 1);
  EXPECT_EQ(lp.ids[1], 0);
}

TEST(SamplerTest, ForcedTokensOverrideEveryStageThenSamplingResumes) {
  SamplingOptions o;
  o.temperature = 0.7f;
  o.seed = 5;
  o.forced_tokens = {3, 0, 9};
  const std::vector<float> logits = {0, 0, 0, 0, 0, 0, 0, 0, 0, 50};  // 9 wins any draw
  EXPECT_EQ(Draw(o, logits, 0), 3);
  EXPECT_EQ(Draw(o, logits, 1, {3}, /*banned=*/{0}), 0);  // banned or not: forced
  EXPECT_EQ(Draw(o, logits, 2), 9);
  SamplingOptions plain = o;
  plain.forced_tokens.clear();
  for (int64_t position : {3, 4, 17}) EXPECT_EQ(Draw(o, logits, position), Draw(plain, logits, position));
}

// The allowed-tokens stage (a grammar's mask): bits over 70 ids.
std::vector<uint32_t> Allowed(std::initializer_list<int32_t> ids) {
  std::vector<uint32_t> words(3, 0);
  for (int32_t id : ids) words[id / 32] |= uint32_t{1} << (id % 32);
  return words;
}

int32_t DrawAllowed(const SamplingOptions& options, std::vector<float> logits, const std::vector<uint32_t>& allowed,
                    int64_t position = 0, std::vector<int32_t> banned = {}) {
  SamplingContext context;
  context.output_position = position;
  context.banned_tokens = banned;
  context.allowed_tokens = allowed;
  return Sampler::Sample(options, context, logits);
}

TEST(SamplerTest, AllowedTokensAloneAreDrawnGreedyOrSampledWithEveryTruncation) {
  std::vector<float> logits(70);
  for (int i = 0; i < 70; ++i) logits[i] = static_cast<float>(i % 13);  // 12, 25, 38, ... lead
  const std::vector<uint32_t> allowed = Allowed({3, 33, 64, 69});
  SamplingOptions greedy;
  EXPECT_EQ(DrawAllowed(greedy, logits, allowed), 64);  // 64 % 13 = 12, the best allowed
  EXPECT_EQ(DrawAllowed(greedy, logits, allowed, 0, /*banned=*/{64}), 33);  // 33 % 13 = 7
  SamplingOptions penalised = greedy;
  penalised.presence_penalty = 100.0f;  // penalties first, then the mask
  SamplingContext history;
  const std::vector<int32_t> seen = {64, 33};
  history.output_tokens = seen;
  history.allowed_tokens = allowed;
  std::vector<float> row = logits;
  EXPECT_EQ(Sampler::Sample(penalised, history, row), 69);  // 69 % 13 = 4 beats 3
  for (int variant = 0; variant < 4; ++variant) {
    SamplingOptions o;
    o.temperature = 1.5f;
    o.top_k = variant == 1 ? 40 : 0;
    o.top_p = variant == 2 ? 0.999f : 1.0f;
    o.min_p = variant == 3 ? 0.01f : 0.0f;
    std::map<int32_t, int> drawn;
    for (int64_t position = 0; position < 400; ++position) {
      o.seed = 77;
      ++drawn[DrawAllowed(o, logits, allowed, position)];
    }
    for (const auto& [id, count] : drawn)
      EXPECT_TRUE(id == 3 || id == 33 || id == 64 || id == 69) << "variant " << variant << " drew " << id;
    EXPECT_GE(drawn.size(), 2u) << "variant " << variant;  // sampled, not greedy
  }
}

TEST(SamplerTest, AMaskThatLeavesNothingDrawsNoToken) {
  const std::vector<float> logits(70, 1.0f);
  SamplingOptions greedy, sampled;
  sampled.temperature = 1.0f;
  sampled.top_p = 0.5f;
  for (const SamplingOptions& o : {greedy, sampled}) {
    EXPECT_EQ(DrawAllowed(o, logits, Allowed({})), Sampler::kNoToken);
    // Only EOS (5) allowed, but banned before min_tokens.
    EXPECT_EQ(DrawAllowed(o, logits, Allowed({5}), 0, /*banned=*/{5}), Sampler::kNoToken);
    EXPECT_EQ(DrawAllowed(o, logits, Allowed({5})), 5);
  }
}

// The oracle of the allowed-tokens stage: the same draw on a row whose
// disallowed logits were set to -inf by hand, with no mask. Sparse masks
// (walked id by id) and dense ones (whole row), greedy and sampled, with
// and without truncation, over a vocabulary the size of Llama 3's.
TEST(SamplerTest, AMaskDrawsExactlyAsTheRowWithDisallowedLogitsAtMinusInfinity) {
  constexpr int kVocab = 128256;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(rng);
  for (double density : {0.00002, 0.001, 0.05, 0.2, 0.9}) {
    std::bernoulli_distribution keep(density);
    std::vector<uint32_t> allowed((kVocab + 31) / 32, 0);
    int count = 0;
    for (int id = 0; id < kVocab; ++id) {
      if (keep(rng)) {
        allowed[id / 32] |= uint32_t{1} << (id % 32);
        ++count;
      }
    }
    std::vector<float> masked = logits;
    for (int id = 0; id < kVocab; ++id)
      if (!((allowed[id / 32] >> (id % 32)) & 1)) masked[id] = -std::numeric_limits<float>::infinity();
    for (int variant = 0; variant < 4; ++variant) {
      SamplingOptions o;
      if (variant > 0) o.temperature = variant == 1 ? 1.0f : 0.7f;
      if (variant == 3) o.top_p = 0.9f;
      for (int64_t position = 0; position < 25; ++position) {
        o.seed = 1000 + position;
        SCOPED_TRACE(testing::Message() << "density " << density << " variant " << variant << " position "
                                        << position);
        const int32_t drawn = DrawAllowed(o, logits, allowed, position);
        ASSERT_NE(drawn, Sampler::kNoToken);
        EXPECT_TRUE((allowed[drawn / 32] >> (drawn % 32)) & 1);
        EXPECT_EQ(drawn, Draw(o, masked, position));
      }
    }
    EXPECT_GT(count, 0);
  }
}

// OpenAI's logit_bias: added to the logits before every other stage, so
// +100 forces its token at temperature 0 and -100 keeps one out.
TEST(SamplerTest, LogitBiasIsAddedFirst) {
  std::vector<float> logits(70);
  for (int i = 0; i < 70; ++i) logits[i] = static_cast<float>(i % 13);
  SamplingOptions greedy;
  EXPECT_EQ(Draw(greedy, logits), 12);
  greedy.logit_bias = {{40, 100.0f}};
  EXPECT_EQ(Draw(greedy, logits), 40);
  greedy.logit_bias = {{12, -100.0f}, {25, -100.0f}, {38, -100.0f}, {51, -100.0f}, {64, -100.0f}};
  EXPECT_EQ(Draw(greedy, logits), 11);  // the best of the rest (lowest id on ties)
  SamplingOptions sampled;
  sampled.temperature = 1.0f;
  sampled.logit_bias = {{3, 100.0f}};
  for (int64_t position = 0; position < 50; ++position) EXPECT_EQ(Draw(sampled, logits, position), 3);
  // Ids outside the row are ignored (the request was checked against the vocabulary).
  greedy.logit_bias = {{700, 100.0f}};
  EXPECT_EQ(Draw(greedy, logits), 12);
}

TEST(CounterRngTest, RoughlyUniform) {
  std::vector<int> buckets(10, 0);
  for (int i = 0; i < 100000; ++i) ++buckets[static_cast<int>(CounterUniform(5, i) * 10)];
  for (int b : buckets) EXPECT_NEAR(b, 10000, 500);
}

}  // namespace
}  // namespace floe
