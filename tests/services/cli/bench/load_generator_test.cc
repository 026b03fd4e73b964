// The load generator against a fake backend: concurrency caps, arrival
// processes, session history, and ending a run whose server is gone.
#include "services/cli/bench/load_generator.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

namespace floe::bench {
namespace {

// Sleeps `delay_ms`, then returns max_tokens tokens (ids 1000+) in one chunk,
// or fails UNAVAILABLE when `fail` is set.
class FakeBackend : public Backend {
 public:
  explicit FakeBackend(int delay_ms, bool fail = false) : delay_ms_(delay_ms), fail_(fail) {}
  void Send(const TurnRequest& request, RequestRecord* record, std::vector<int32_t>* output) override {
    const int now = ++in_flight_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      peak_ = std::max(peak_, now);
      prompts_.push_back(request.prompt);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    --in_flight_;
    record->e2e_ms = delay_ms_;
    if (fail_) {
      record->status_code = 14;
      record->error = "connection refused";
      return;
    }
    record->ok = true;
    record->ttft_ms = delay_ms_;
    record->chunks.push_back({static_cast<double>(delay_ms_), request.max_tokens});
    record->output_tokens = request.max_tokens;
    for (int i = 0; i < request.max_tokens; ++i) output->push_back(1000 + i);
  }
  int peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  std::vector<std::vector<int32_t>> prompts() {
    std::lock_guard<std::mutex> lock(mu_);
    return prompts_;
  }

 private:
  int delay_ms_;
  bool fail_;
  std::atomic<int> in_flight_{0};
  std::mutex mu_;
  int peak_ = 0;
  std::vector<std::vector<int32_t>> prompts_;
};

std::vector<Job> SingleTurnJobs(int n, int output_len) {
  std::vector<Job> jobs(n);
  for (int i = 0; i < n; ++i) jobs[i].turns.push_back({{1, 2, 3, i}, output_len});
  return jobs;
}

TEST(LoadGeneratorTest, ClosedLoopRespectsMaxConcurrency) {
  FakeBackend backend(20);
  LoadOptions options;
  options.max_concurrency = 3;
  RunResult result = RunLoad(SingleTurnJobs(12, 4), backend, options);
  ASSERT_EQ(result.records.size(), 12u);
  EXPECT_EQ(backend.peak(), 3);
  for (size_t i = 0; i < result.records.size(); ++i) {
    EXPECT_EQ(result.records[i].index, static_cast<int>(i));
    EXPECT_TRUE(result.records[i].ok);
    EXPECT_EQ(result.records[i].prompt_tokens, 4);
    EXPECT_EQ(result.records[i].max_tokens, 4);
  }
  EXPECT_FALSE(result.aborted);
  // 12 requests of 20 ms, 3 at a time: at least 4 rounds.
  EXPECT_GE(result.duration_s, 0.075);
}

TEST(LoadGeneratorTest, PoissonArrivalsHaveTheRequestedRate) {
  LoadOptions options;
  options.request_rate = 10;
  options.seed = 3;
  std::vector<double> t = ArrivalTimes(SingleTurnJobs(4000, 1), options);
  EXPECT_EQ(t[0], 0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  EXPECT_NEAR(t.back() / (t.size() - 1), 0.1, 0.01);  // mean interval 1/rate
  EXPECT_EQ(ArrivalTimes(SingleTurnJobs(4000, 1), options), t);  // seeded
}

TEST(LoadGeneratorTest, GammaBurstinessKeepsTheMeanButWidensTheSpread) {
  auto cv = [](const std::vector<double>& t) {
    std::vector<double> gaps;
    for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
    double mean = 0, var = 0;
    for (double g : gaps) mean += g / gaps.size();
    for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
    return std::make_pair(mean, std::sqrt(var) / mean);
  };
  LoadOptions options;
  options.request_rate = 5;
  options.burstiness = 0.25;  // coefficient of variation 1/sqrt(0.25) = 2
  auto [mean, variation] = cv(ArrivalTimes(SingleTurnJobs(20000, 1), options));
  EXPECT_NEAR(mean, 0.2, 0.02);
  EXPECT_NEAR(variation, 2.0, 0.2);
}

TEST(LoadGeneratorTest, InfiniteRateAndTraceTimestamps) {
  LoadOptions options;
  std::vector<Job> jobs = SingleTurnJobs(3, 1);
  EXPECT_EQ(ArrivalTimes(jobs, options), (std::vector<double>{0, 0, 0}));
  jobs[1].arrival_s = 0.5;
  jobs[2].arrival_s = 1.5;
  EXPECT_EQ(ArrivalTimes(jobs, options), (std::vector<double>{0, 0.5, 1.5}));
}

TEST(LoadGeneratorTest, LinearRampUpShortensTheGaps) {
  LoadOptions options;
  options.ramp_up = "linear";
  options.ramp_start_rate = 1;
  options.ramp_end_rate = 100;
  std::vector<double> t = ArrivalTimes(SingleTurnJobs(2000, 1), options);
  const double first_half = t[999] - t[0], second_half = t[1999] - t[1000];
  EXPECT_GT(first_half, 2 * second_half);
}

TEST(LoadGeneratorTest, SessionTurnsResendTheGrowingHistory) {
  FakeBackend backend(1);
  Job session;
  session.session_id = "s";
  session.grow_history = true;
  session.turns = {{{1, 2}, 2}, {{3}, 1}, {{4, 5}, 1}};
  RunResult result = RunLoad({session}, backend, LoadOptions());
  ASSERT_EQ(result.records.size(), 3u);
  auto prompts = backend.prompts();
  ASSERT_EQ(prompts.size(), 3u);
  EXPECT_EQ(prompts[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(prompts[1], (std::vector<int32_t>{1, 2, 1000, 1001, 3}));
  EXPECT_EQ(prompts[2], (std::vector<int32_t>{1, 2, 1000, 1001, 3, 1000, 4, 5}));
  EXPECT_EQ(result.records[2].prompt_tokens, 8);
  EXPECT_EQ(result.records[2].session_id, "s");
  EXPECT_EQ(result.records[2].turn, 2);
}

TEST(LoadGeneratorTest, DeadServerEndsTheRunWithAPartialResult) {
  FakeBackend backend(1, /*fail=*/true);
  LoadOptions options;
  options.max_concurrency = 1;
  options.abort_after_consecutive_failures = 4;
  RunResult result = RunLoad(SingleTurnJobs(100, 4), backend, options);
  EXPECT_TRUE(result.aborted);
  EXPECT_EQ(result.records.size(), 4u);
  EXPECT_EQ(result.not_sent, 96);
  EXPECT_NE(result.abort_reason.find("UNAVAILABLE"), std::string::npos);
  EXPECT_FALSE(result.records[0].ok);
}

}  // namespace
}  // namespace floe::bench
