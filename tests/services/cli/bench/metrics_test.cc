// Every metric on synthetic timelines whose answers are known by hand.
#include "services/cli/bench/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace floe::bench {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;

// A completed request sent at `start_s`, with chunks at `times` (ms after the
// send) carrying `tokens` each, ending at `end_ms`.
RequestRecord Request(double start_s, std::vector<double> times, std::vector<int> tokens, double end_ms,
                      int prompt = 10) {
  RequestRecord r;
  r.ok = true;
  r.start_s = start_s;
  r.prompt_tokens = prompt;
  for (size_t i = 0; i < times.size(); ++i) {
    r.chunks.push_back({times[i], tokens[i]});
    r.output_tokens += tokens[i];
    if (r.ttft_ms < 0 && tokens[i] > 0) r.ttft_ms = times[i];
  }
  r.e2e_ms = end_ms;
  return r;
}

TEST(PercentileTest, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = [2.5, 3.7, 3.97]
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 90), 3.7, 1e-12);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
}

TEST(StatsTest, MeanStdMinMax) {
  LatencyStats s = Stats({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(s.count, 8);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.stddev, 2);  // population std
  EXPECT_DOUBLE_EQ(s.p50, 4.5);
  EXPECT_DOUBLE_EQ(s.min, 2);
  EXPECT_DOUBLE_EQ(s.max, 9);
}

TEST(TpotTest, ExcludesTheFirstToken) {
  // TTFT 100, 5 tokens, E2E 180: (180 - 100) / 4 = 20.
  EXPECT_DOUBLE_EQ(Tpot(Request(0, {100, 120, 140, 160, 180}, {1, 1, 1, 1, 1}, 180)), 20);
  EXPECT_DOUBLE_EQ(Tpot(Request(0, {100}, {1}, 100)), 0);  // one token: no TPOT
}

TEST(ItlTest, OneTokenPerChunkGivesTheGaps) {
  EXPECT_THAT(TokenItls(Request(0, {100, 110, 130, 160}, {1, 1, 1, 1}, 160)), ElementsAre(10, 20, 30));
}

TEST(ItlTest, MultiTokenChunkCountsAsEqualGaps) {
  // Chunk at 100 with 1 token, chunk at 160 with 3 tokens: three gaps of 20,
  // not one gap of 60.
  EXPECT_THAT(TokenItls(Request(0, {100, 160}, {1, 3}, 160)), ElementsAre(20, 20, 20));
}

TEST(ItlTest, ExtraFirstChunkTokensArriveWithTheFirst) {
  // 2 tokens at TTFT, then 2 at +40: gaps 0, 20, 20; T - 1 = 3 values whose
  // mean equals TPOT when E2E is the last chunk.
  RequestRecord r = Request(0, {100, 140}, {2, 2}, 140);
  EXPECT_THAT(TokenItls(r), ElementsAre(0, 20, 20));
  EXPECT_NEAR(Tpot(r), 40.0 / 3, 1e-12);
}

TEST(ItlTest, TextOnlyChunksAreSkipped) {
  EXPECT_THAT(TokenItls(Request(0, {100, 105, 120}, {1, 0, 1}, 120)), ElementsAre(20));
}

TEST(SloTest, Parses) {
  auto slo = ParseSlo("ttft:500 tpot:50,e2el:2000");
  ASSERT_TRUE(slo.ok());
  EXPECT_EQ(slo->ttft_ms, 500);
  EXPECT_EQ(slo->tpot_ms, 50);
  EXPECT_EQ(slo->e2e_ms, 2000);
  EXPECT_FALSE(ParseSlo("ttft=500").ok());
  EXPECT_FALSE(ParseSlo("latency:5").ok());
  EXPECT_FALSE(ParseSlo("ttft:-1").ok());
  EXPECT_FALSE(ParseSlo("").ok());
}

TEST(SummarizeTest, KnownTimeline) {
  // A: sent at 0 s, TTFT 100 ms, 3 tokens, E2E 300 ms -> TPOT 100.
  // B: sent at 0.5 s, TTFT 200 ms, 4 tokens (last chunk holds 2), E2E 500 ms -> TPOT 100.
  // C: sent at 0.2 s, fails UNAVAILABLE after 50 ms.
  RequestRecord a = Request(0.0, {100, 200, 300}, {1, 1, 1}, 300, 10);
  RequestRecord b = Request(0.5, {200, 300, 500}, {1, 1, 2}, 500, 20);
  RequestRecord c;
  c.start_s = 0.2;
  c.e2e_ms = 50;
  c.status_code = 14;
  c.prompt_tokens = 30;
  Slo slo;
  slo.ttft_ms = 150;
  Summary s = Summarize({a, b, c}, slo);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.failures_by_code.at("UNAVAILABLE"), 1);
  EXPECT_DOUBLE_EQ(s.duration_s, 1.0);  // first send 0 s, last end 0.5 + 0.5 s
  EXPECT_EQ(s.total_input_tokens, 30);  // failed prompts do not count
  EXPECT_EQ(s.total_output_tokens, 7);
  EXPECT_DOUBLE_EQ(s.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 7.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 37.0);
  EXPECT_EQ(s.good_requests, 1);  // only A meets TTFT <= 150
  EXPECT_DOUBLE_EQ(s.goodput, 1.0);
  EXPECT_DOUBLE_EQ(s.ttft_ms.mean, 150);
  EXPECT_DOUBLE_EQ(s.ttft_ms.p50, 150);
  EXPECT_DOUBLE_EQ(s.tpot_ms.mean, 100);
  EXPECT_DOUBLE_EQ(s.e2e_ms.mean, 400);
  EXPECT_NEAR(s.e2e_ms.p99, 300 + 200 * 0.99, 1e-9);
  // ITLs: A -> 100, 100; B -> 100, 100, 100 (200 ms over 2 tokens).
  EXPECT_EQ(s.itl_ms.count, 5);
  EXPECT_DOUBLE_EQ(s.itl_ms.mean, 100);
  // A [0, 0.3], C [0.2, 0.25], B [0.5, 1.0]: at most 2 at once.
  EXPECT_EQ(s.peak_concurrency, 2);
  // Token arrival seconds: A all in [0,1) = 3; B at 0.7, 0.8, 1.0 (x2) -> [0,1) gets 2 more, [1,2) gets 2.
  EXPECT_DOUBLE_EQ(s.peak_output_throughput, 5);
}

TEST(SummarizeTest, BackToBackRequestsDoNotOverlap) {
  Summary s = Summarize({Request(0.0, {100}, {1}, 1000), Request(1.0, {100}, {1}, 1000)}, Slo());
  EXPECT_EQ(s.peak_concurrency, 1);
  EXPECT_EQ(s.good_requests, 0);  // no SLO: goodput not computed
  EXPECT_DOUBLE_EQ(s.goodput, 0);
  EXPECT_EQ(s.tpot_ms.count, 0);  // one token each
}

TEST(SummarizeTest, TpotAndE2eSlos) {
  Slo slo;
  slo.tpot_ms = 60;
  slo.e2e_ms = 400;
  RequestRecord fast = Request(0, {100, 150, 200}, {1, 1, 1}, 200);    // TPOT 50, E2E 200
  RequestRecord slow_tpot = Request(0, {100, 200, 300}, {1, 1, 1}, 300);  // TPOT 100
  RequestRecord slow_e2e = Request(0, {300, 350, 450}, {1, 1, 1}, 450);   // TPOT 75 and E2E 450
  Summary s = Summarize({fast, slow_tpot, slow_e2e}, slo);
  EXPECT_EQ(s.good_requests, 1);
  EXPECT_THAT(s.goodput, DoubleNear(1 / 0.45, 1e-9));
}

TEST(SummarizeTest, EmptyAndAllFailed) {
  EXPECT_EQ(Summarize({}, Slo()).completed, 0);
  RequestRecord failed;
  failed.status_code = 4;
  failed.e2e_ms = 10;
  Summary s = Summarize({failed, failed}, Slo());
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.failures_by_code.at("DEADLINE_EXCEEDED"), 2);
  EXPECT_EQ(s.request_throughput, 0);
  EXPECT_EQ(s.ttft_ms.count, 0);
}

}  // namespace
}  // namespace floe::bench
