// Fault: a client opens a Generate stream and never reads it (issue 17,
// case 3).
//
// The stalled client shrinks its HTTP/2 receive window (lookahead bytes, no
// BDP probing) so the router's writes to it block after a few KiB. What is
// promised:
// - the stall holds back only its own stream: other clients' requests
//   complete normally and promptly meanwhile (the router writes to a client
//   from a callback reactor and reads the worker stream only as fast as the
//   client takes it, so no thread and no other stream waits);
// - the stalled request's admission slot comes back: the router's
//   floe_router_requests_in_flight returns to 0, and the worker's running
//   count to 0.
// The bound: the gRPC front has no write-stall timeout of its own (the HTTP
// front drops a reader after 60 s of one write not completing). A stalled
// gRPC stream is ended by the client's deadline, which the router propagates
// to the worker call, or, when the client set none, by the router's fixed
// 600 s cap on a worker call (RouterServiceOptions::max_request_time, no
// flag). So the test holds the stream with a 6 s deadline and checks the slot
// is back within that plus 2 s; a second stalled stream without a deadline
// is shown still holding its slot after the first is freed, then cancelled
// by its client, which frees it at once.
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

constexpr auto kStallDeadline = std::chrono::seconds(6);
constexpr double kFreeSlackS = 2.0;
// ~50 wire bytes per token message: 600 tokens are far beyond the window.
constexpr int kStalledTokens = 600;
constexpr int kOthers = 8;
constexpr int kOtherTokens = 32;
// Alone, a 32-token request takes tens of ms here; allow a loaded machine.
constexpr double kOtherBoundS = 5.0;

TEST(StalledClientTest, OthersAreServedAndTheStalledSlotReturnsAtTheClientDeadline) {
  LocalCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  const std::string router_metrics = MetricsUrl(cluster.router());
  const std::string worker_metrics = MetricsUrl(cluster.worker(0));
  auto router_in_flight = [&] { return Metric(router_metrics, "floe_router_requests_in_flight"); };
  const double generated_before = Metric(worker_metrics, "floe_generation_tokens_total");

  const auto stalled_at = Clock::now();
  StalledStream stalled(cluster.router_address(), GreedyRequest("Never read", kStalledTokens), kStallDeadline);
  StalledStream forever(cluster.router_address(), GreedyRequest("Never read, no deadline", kStalledTokens),
                        std::chrono::milliseconds(0));
  ASSERT_TRUE(WaitFor([&] { return router_in_flight() == 2; }, std::chrono::seconds(2)));

  // Both run to max_tokens in the engine: it never waits on a reader (the
  // worker queues outputs per request, at most max_tokens of them).
  ASSERT_TRUE(WaitFor(
      [&] { return Metric(worker_metrics, "floe_generation_tokens_total") - generated_before >= 2 * kStalledTokens; },
      std::chrono::seconds(5)));
  EXPECT_TRUE(WaitFor([&] { return Metric(worker_metrics, "floe_num_requests_running") == 0; },
                      std::chrono::seconds(2)));
  // ...but the router still holds both: their clients have not taken them.
  EXPECT_EQ(router_in_flight(), 2) << "a stream that was never read finished: it did not stall";

  // Meanwhile other clients are served as usual.
  auto stub = cluster.RouterStub();
  double slowest = 0, total = 0;
  for (int i = 0; i < kOthers; ++i) {
    Generation g = Generate(*stub, GreedyRequest(absl::StrCat("Served meanwhile ", i), kOtherTokens), 10000);
    EXPECT_TRUE(g.status.ok()) << g.status.error_message();
    EXPECT_EQ(g.token_ids.size(), static_cast<size_t>(kOtherTokens));
    slowest = std::max(slowest, g.e2e_s);
    total += g.e2e_s;
  }
  EXPECT_LT(slowest, kOtherBoundS);
  const double others_done_s = SecondsSince(stalled_at);
  EXPECT_LT(others_done_s, std::chrono::duration<double>(kStallDeadline).count())
      << "the other requests ran past the stall: they did not run during it";

  // The stalled stream's slot comes back at its deadline (+ slack).
  const bool freed = WaitFor([&] { return router_in_flight() == 1; },
                             std::chrono::milliseconds(static_cast<int>(
                                 (std::chrono::duration<double>(kStallDeadline).count() + kFreeSlackS) * 1000)));
  const double freed_s = SecondsSince(stalled_at);
  EXPECT_TRUE(freed) << "the stalled stream still holds its slot " << freed_s << " s after it started";
  const grpc::Status stalled_status = stalled.Finish();
  EXPECT_EQ(stalled_status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << stalled_status.error_message();

  // Without a deadline nothing ends it but its client (or the 600 s cap);
  // a cancelling client frees the slot at once.
  const double still_held = router_in_flight();
  const auto cancelled_at = Clock::now();
  forever.Cancel();
  EXPECT_TRUE(WaitFor([&] { return router_in_flight() == 0; }, std::chrono::seconds(2)));
  const double cancel_freed_s = SecondsSince(cancelled_at);
  const grpc::Status forever_status = forever.Finish();
  EXPECT_EQ(forever_status.error_code(), grpc::StatusCode::CANCELLED) << forever_status.error_message();

  std::printf("[stalled_client] %d others x %d tokens during the stall: mean %.3f s, max %.3f s (all done %.3f s "
              "after the stall began)\n",
              kOthers, kOtherTokens, total / kOthers, slowest, others_done_s);
  std::printf("[stalled_client] stalled stream (deadline %.0f s): slot freed %.3f s after it was sent, status %d %s\n",
              std::chrono::duration<double>(kStallDeadline).count(), freed_s, stalled_status.error_code(),
              stalled_status.error_message().c_str());
  std::printf("[stalled_client] stalled stream without a deadline: %.0f slot(s) still held at %.3f s; freed %.3f s "
              "after its client cancelled (%d %s); otherwise held up to the router's 600 s cap\n",
              still_held, SecondsBetween(stalled_at, cancelled_at), cancel_freed_s, forever_status.error_code(),
              forever_status.error_message().c_str());
}

}  // namespace
}  // namespace floe::testing
