// Fault: SIGTERM under load (issue 17, case 5), to the router and,
// separately, to a worker.
//
// A SIGTERMed service drains: it refuses new work, lets running requests
// finish for up to --drain-timeout-s, then cancels what is left and exits 0.
// Each test runs short streams (done well inside the drain) and long ones
// (4000 tokens: cut by it) when the signal lands. What is promised:
// - every accepted request either completes OK (all its tokens) or ends with
//   a clear status, UNAVAILABLE or CANCELLED with a message; none hangs: all
//   end within the drain timeout + a slack, far inside their deadlines;
// - the short ones complete OK;
// - a request sent during the drain is refused (router) or served by the
//   other worker (worker: the router retries a refusal elsewhere);
// - the process exits 0 within its drain timeout + a slack.
#include <signal.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

constexpr int kDrainS = 3;
// After the drain: the gRPC server's 500 ms shutdown grace, then ~1.4 s in
// which the Prometheus exposer (civetweb's mg_stop) stops, then the exit;
// measured 1.9 s in all on 2 cores.
constexpr double kExitSlackS = 3.0;
constexpr auto kDeadline = std::chrono::seconds(60);
constexpr int kShortTokens = 64;
constexpr int kLongTokens = 4000;
constexpr int kShort = 4, kLong = 4;

bool ClearEnd(const grpc::Status& s) {
  return (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::CANCELLED) &&
         !s.error_message().empty();
}

struct Tally {
  int ok = 0, cut = 0;
  double last_end_s = 0;  // after the signal
};

// Checks and prints how the streams ended; `signalled_at` is when SIGTERM was sent.
Tally CheckOutcomes(const char* who, std::vector<std::unique_ptr<BackgroundStream>>& streams, int expected_tokens,
                    bool must_complete, Clock::time_point signalled_at) {
  Tally t;
  for (size_t i = 0; i < streams.size(); ++i) {
    const StreamOutcome& o = streams[i]->Join();
    const double end_s = SecondsBetween(signalled_at, o.ended);
    t.last_end_s = std::max(t.last_end_s, end_s);
    std::printf("[sigterm_drain] %s stream %zu: %zu/%d tokens, ended %.3f s after SIGTERM: %d %s\n", who, i,
                o.token_ids.size(), expected_tokens, end_s, o.status.error_code(), o.status.error_message().c_str());
    if (o.status.ok()) {
      ++t.ok;
      EXPECT_TRUE(o.completed);
      EXPECT_EQ(o.token_ids.size(), static_cast<size_t>(expected_tokens));
    } else {
      ++t.cut;
      EXPECT_FALSE(must_complete) << who << " stream " << i << " did not complete: " << o.status.error_message();
      EXPECT_TRUE(ClearEnd(o.status)) << who << " stream " << i << " ended " << o.status.error_code() << " '"
                                      << o.status.error_message() << "'";
    }
    EXPECT_LT(end_s, kDrainS + kExitSlackS) << who << " stream " << i << " outlived the drain";
  }
  return t;
}

TEST(SigtermDrainTest, RouterDrainsRunningStreamsAndExitsZero) {
  LocalCluster cluster(1, {"--max-model-len", "4096"}, {"--drain-timeout-s", std::to_string(kDrainS)});
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  std::vector<std::unique_ptr<BackgroundStream>> longs, shorts;
  for (int i = 0; i < kLong; ++i)
    longs.push_back(std::make_unique<BackgroundStream>(*stub, GreedyRequest(absl::StrCat("Long ", i), kLongTokens),
                                                       kDeadline));
  for (auto& s : longs) ASSERT_TRUE(s->WaitForTokens(1, std::chrono::seconds(20)));
  for (int i = 0; i < kShort; ++i)
    shorts.push_back(std::make_unique<BackgroundStream>(*stub, GreedyRequest(absl::StrCat("Short ", i), kShortTokens),
                                                        kDeadline));
  // Every stream accepted and streaming when the signal lands.
  for (auto& s : shorts) ASSERT_TRUE(s->WaitForTokens(1, std::chrono::seconds(20)));

  const auto signalled_at = Clock::now();
  ASSERT_EQ(::kill(cluster.router().pid(), SIGTERM), 0);
  ExitWatch exit_watch(cluster.router(), std::chrono::seconds(kDrainS + 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Generation refused = Generate(*stub, GreedyRequest("During the drain", 8), 5000);
  std::printf("[sigterm_drain] router: request during the drain: %d %s\n", refused.status.error_code(),
              refused.status.error_message().c_str());
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();

  const Tally short_tally = CheckOutcomes("router short", shorts, kShortTokens, true, signalled_at);
  const Tally long_tally = CheckOutcomes("router long", longs, kLongTokens, false, signalled_at);
  const double exit_s = exit_watch.Seconds();
  std::printf("[sigterm_drain] router (drain %d s): short %d ok; long %d ok, %d cut; last stream ended %.3f s, "
              "router exited (%s) %.3f s after SIGTERM\n",
              kDrainS, short_tally.ok, long_tally.ok, long_tally.cut, long_tally.last_end_s,
              exit_s < 0 ? "still running" : DescribeExit(cluster.router().exit_status()).c_str(), exit_s);
  ASSERT_GE(exit_s, 0) << "the router did not exit";
  EXPECT_TRUE(ExitedZero(cluster.router().exit_status())) << DescribeExit(cluster.router().exit_status());
  EXPECT_LT(exit_s, kDrainS + kExitSlackS);
}

TEST(SigtermDrainTest, WorkerDrainsItsStreamsWhileTheOtherServesAndExitsZero) {
  LocalCluster cluster(2, {"--max-model-len", "4096", "--drain-timeout-s", std::to_string(kDrainS)});
  ASSERT_TRUE(cluster.ok());
  const std::string draining = SessionOnWorker(cluster, 0);
  const std::string other = SessionOnWorker(cluster, 1);
  ASSERT_FALSE(draining.empty());
  ASSERT_FALSE(other.empty());
  auto stub = cluster.RouterStub();
  std::vector<std::unique_ptr<BackgroundStream>> longs, shorts, elsewhere;
  for (int i = 0; i < kLong; ++i)
    longs.push_back(std::make_unique<BackgroundStream>(
        *stub, GreedyRequest(absl::StrCat("Long ", i), kLongTokens, draining), kDeadline));
  for (auto& s : longs) ASSERT_TRUE(s->WaitForTokens(1, std::chrono::seconds(20)));
  for (int i = 0; i < kShort; ++i) {
    shorts.push_back(std::make_unique<BackgroundStream>(
        *stub, GreedyRequest(absl::StrCat("Short ", i), kShortTokens, draining), kDeadline));
    elsewhere.push_back(std::make_unique<BackgroundStream>(
        *stub, GreedyRequest(absl::StrCat("Elsewhere ", i), kShortTokens, other), kDeadline));
  }
  for (auto& s : shorts) ASSERT_TRUE(s->WaitForTokens(1, std::chrono::seconds(20)));

  const auto signalled_at = Clock::now();
  ASSERT_EQ(::kill(cluster.worker(0).pid(), SIGTERM), 0);
  ExitWatch exit_watch(cluster.worker(0), std::chrono::seconds(kDrainS + 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // The draining worker refuses it (UNAVAILABLE) and the router retries it
  // on the other one, or has already stopped sending it there.
  Generation moved = Generate(*stub, GreedyRequest("During the drain", 8, draining), 10000);
  std::printf("[sigterm_drain] worker: request for the draining worker's session during the drain: %d %s\n",
              moved.status.error_code(), moved.status.error_message().c_str());
  EXPECT_TRUE(moved.status.ok()) << moved.status.error_message();
  EXPECT_EQ(moved.token_ids.size(), 8u);

  const Tally short_tally = CheckOutcomes("worker short", shorts, kShortTokens, true, signalled_at);
  const Tally long_tally = CheckOutcomes("worker long", longs, kLongTokens, false, signalled_at);
  const Tally other_tally = CheckOutcomes("other worker", elsewhere, kShortTokens, true, signalled_at);
  const double exit_s = exit_watch.Seconds();
  std::printf("[sigterm_drain] worker (drain %d s): short %d ok; long %d ok, %d cut; other worker %d ok; "
              "worker exited (%s) %.3f s after SIGTERM\n",
              kDrainS, short_tally.ok, long_tally.ok, long_tally.cut, other_tally.ok,
              exit_s < 0 ? "still running" : DescribeExit(cluster.worker(0).exit_status()).c_str(),
              exit_s);
  ASSERT_GE(exit_s, 0) << "the worker did not exit";
  EXPECT_TRUE(ExitedZero(cluster.worker(0).exit_status())) << DescribeExit(cluster.worker(0).exit_status());
  EXPECT_LT(exit_s, kDrainS + kExitSlackS);
}

// A router defect this suite found (about 1 run in 20 of the test above):
// when a relayed call ended while a write to a stalled client was in flight,
// the GenerateReactor never finished (OnWriteDone(ok = false) left it open),
// so SIGTERM hung in grpc::Server::Shutdown for good. Stalled clients keep a
// write in flight, which makes the race likely (hung 1 in 8 before the fix).
TEST(SigtermDrainTest, RouterExitsWithStalledStreamsAtTheDrainTimeout) {
  LocalCluster cluster(1, {}, {"--drain-timeout-s", "1"});
  ASSERT_TRUE(cluster.ok());
  const std::string router_metrics = MetricsUrl(cluster.router());
  std::vector<std::unique_ptr<StalledStream>> stalled;
  for (int i = 0; i < 16; ++i)
    stalled.push_back(std::make_unique<StalledStream>(cluster.router_address(),
                                                      GreedyRequest(absl::StrCat("Stalled ", i), 600), kDeadline));
  ASSERT_TRUE(WaitFor([&] { return Metric(router_metrics, "floe_router_requests_in_flight") == 16; },
                      std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // every write to them blocks
  ASSERT_EQ(::kill(cluster.router().pid(), SIGTERM), 0);
  ExitWatch exit_watch(cluster.router(), std::chrono::seconds(10));
  const double exit_s = exit_watch.Seconds();
  std::printf("[sigterm_drain] router with 16 stalled streams (drain 1 s): exited (%s) %.3f s after SIGTERM\n",
              exit_s < 0 ? "still running" : DescribeExit(cluster.router().exit_status()).c_str(), exit_s);
  ASSERT_GE(exit_s, 0) << "the router hangs in shutdown";
  EXPECT_LT(exit_s, 1 + kExitSlackS);
  for (auto& s : stalled) {
    s->Cancel();
    s->Finish();
  }
}

}  // namespace
}  // namespace floe::testing
