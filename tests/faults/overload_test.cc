// Fault: 10x the router's capacity at once (issue 17, case 4).
//
// The router admits 4 requests, queues 4 more for at most 500 ms, and must
// refuse the rest at once (docs/security.md, "Overload"). 80 streams arrive
// together, 10x the 8 it can hold; each admitted one runs long enough
// (900 tokens) that the queued ones time out. What is promised:
// - every stream either completes OK (all its tokens) or is refused with
//   RESOURCE_EXHAUSTED, nothing else, and none hangs;
// - a refusal comes within queue_timeout + a slack (the queue-full ones at
//   once, the queued ones at the timeout);
// - floe_router_admission_rejections_total and
//   floe_router_requests_total{code="RESOURCE_EXHAUSTED"} count every refusal;
// - router and worker memory stay bounded (VmRSS and its peak VmHWM).
// The figures are printed for the report.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

constexpr int kMaxInFlight = 4;
constexpr int kMaxQueued = 4;
constexpr int kQueueTimeoutMs = 500;
constexpr int kStreams = 80;
constexpr int kTokens = 900;
// docs/security.md measured refusals up to 250 ms late with both cores
// decoding; three times that, for a machine shared with other tests.
constexpr double kRejectSlackS = 0.75;
// About twice the peaks measured here (router 78 MiB, worker 173 MiB) when
// the bounds were set. The worker starts bigger since (294 MiB before any
// request, 313 at its peak here), so its growth under the overload is
// bounded too: the 80 streams added 19 MiB.
constexpr double kRouterRssBoundMiB = 150;
constexpr double kWorkerRssBoundMiB = 350;
constexpr double kWorkerRssGrowthBoundMiB = 100;

struct Result {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  size_t tokens = 0;
  double seconds = 0;
};

TEST(OverloadTest, TenTimesCapacityIsServedOrRefusedOnTimeWithBoundedMemory) {
  LocalCluster cluster(1, {}, {"--max-in-flight", std::to_string(kMaxInFlight), "--max-queued",
                               std::to_string(kMaxQueued), "--queue-timeout-ms", std::to_string(kQueueTimeoutMs)});
  ASSERT_TRUE(cluster.ok());
  const std::string router_metrics = MetricsUrl(cluster.router());
  const pid_t router_pid = cluster.router().pid();
  const pid_t worker_pid = cluster.worker(0).pid();
  const double rejections_before = Metric(router_metrics, "floe_router_admission_rejections_total");
  auto exhausted_counted = [&] {
    const double v = Metric(router_metrics, "floe_router_requests_total", {"code=\"RESOURCE_EXHAUSTED\""});
    return std::isnan(v) ? 0.0 : v;  // the label appears with the first refusal
  };
  const double exhausted_before = exhausted_counted();
  ASSERT_FALSE(std::isnan(rejections_before));
  const double router_rss_before = RssMiB(router_pid), worker_rss_before = RssMiB(worker_pid);
  const double router_peak_before = PeakRssMiB(router_pid), worker_peak_before = PeakRssMiB(worker_pid);

  // Every stream waits at a gate, so all 80 arrive within a few ms.
  auto stub = cluster.RouterStub();
  std::vector<Result> results(kStreams);
  std::mutex mu;
  std::condition_variable go;
  bool started = false;
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        go.wait(lock, [&] { return started; });
      }
      Generation g = Generate(*stub, GreedyRequest(absl::StrCat("Overload stream ", i), kTokens), 60000);
      results[i] = {g.status.error_code(), g.status.error_message(), g.token_ids.size(), g.e2e_s};
    });
  }
  const auto began = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    started = true;
  }
  go.notify_all();
  for (auto& t : clients) t.join();
  const double wall_s = SecondsSince(began);

  int ok = 0, rejected = 0, at_once = 0, timed_out = 0;
  double max_reject_s = 0, max_ok_s = 0;
  for (int i = 0; i < kStreams; ++i) {
    const Result& r = results[i];
    if (r.code == grpc::StatusCode::OK) {
      ++ok;
      EXPECT_EQ(r.tokens, static_cast<size_t>(kTokens)) << "stream " << i;
      max_ok_s = std::max(max_ok_s, r.seconds);
    } else {
      EXPECT_EQ(r.code, grpc::StatusCode::RESOURCE_EXHAUSTED) << "stream " << i << ": " << r.message;
      if (r.code != grpc::StatusCode::RESOURCE_EXHAUSTED) continue;
      ++rejected;
      EXPECT_EQ(r.tokens, 0u);
      max_reject_s = std::max(max_reject_s, r.seconds);
      (absl::StrContains(r.message, "queue_timeout") ? timed_out : at_once)++;
    }
  }
  const double rejections_counted = Metric(router_metrics, "floe_router_admission_rejections_total") - rejections_before;
  const double exhausted = exhausted_counted() - exhausted_before;
  const double router_rss_after = RssMiB(router_pid), worker_rss_after = RssMiB(worker_pid);
  const double router_peak = PeakRssMiB(router_pid), worker_peak = PeakRssMiB(worker_pid);
  std::printf("[overload] %d streams x %d tokens at once, max_in_flight %d, max_queued %d, queue_timeout %d ms: "
              "%d ok (slowest %.3f s), %d RESOURCE_EXHAUSTED (%d queue full, %d queue timeout), max rejection "
              "latency %.3f s, wall %.3f s\n",
              kStreams, kTokens, kMaxInFlight, kMaxQueued, kQueueTimeoutMs, ok, max_ok_s, rejected, at_once, timed_out,
              max_reject_s, wall_s);
  std::printf("[overload] counted: admission_rejections_total +%.0f, requests_total{RESOURCE_EXHAUSTED} +%.0f\n",
              rejections_counted, exhausted);
  std::printf("[overload] RSS MiB: router %.1f -> %.1f (peak %.1f -> %.1f), worker %.1f -> %.1f (peak %.1f -> %.1f); "
              "bounds %.0f / %.0f\n",
              router_rss_before, router_rss_after, router_peak_before, router_peak, worker_rss_before, worker_rss_after,
              worker_peak_before, worker_peak, kRouterRssBoundMiB, kWorkerRssBoundMiB);

  EXPECT_EQ(ok + rejected, kStreams);
  // At most capacity is admitted at first, and one more per completion
  // inside the queue timeout: 900-token requests take longer than that.
  EXPECT_GE(ok, kMaxInFlight);
  EXPECT_GE(rejected, kStreams - kMaxInFlight - kMaxQueued);
  EXPECT_GE(at_once, kStreams - kMaxInFlight - kMaxQueued);
  EXPECT_LE(max_reject_s, kQueueTimeoutMs / 1000.0 + kRejectSlackS);
  EXPECT_EQ(rejections_counted, rejected);
  EXPECT_EQ(exhausted, rejected);
  EXPECT_GT(router_peak, 0);
  EXPECT_LT(router_peak, kRouterRssBoundMiB);
  EXPECT_GT(worker_peak, 0);
  EXPECT_LT(worker_peak, kWorkerRssBoundMiB);
  EXPECT_LT(worker_peak - worker_rss_before, kWorkerRssGrowthBoundMiB);
  EXPECT_EQ(Metric(router_metrics, "floe_router_requests_in_flight"), 0);
}

}  // namespace
}  // namespace floe::testing
