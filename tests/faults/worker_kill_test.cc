// Fault: a worker is SIGKILLed while it streams (issue 17, case 1).
//
// A router in front of two workers started by hand (not `floe local`, so
// nothing restarts the dead one). What a client is promised:
// - a stream that already received tokens from the killed worker ends with
//   UNAVAILABLE, promptly, not OK (its output is cut) and not a hang, and
//   its message names that worker and says it failed mid-stream;
// - a request the killed worker had accepted but not started (queued in its
//   engine: --max-num-seqs 2 keeps the third one waiting, which the worker's
//   floe_num_requests_waiting confirms before the kill) is retried on the
//   other worker and completes with the same greedy output, as if nothing
//   happened;
// - a stream on the surviving worker is untouched, and requests sent after
//   the kill succeed there;
// - with both workers dead, a request is tried once on each (panic routing,
//   counted in floe_router_worker_panic_picks_total) and ends UNAVAILABLE
//   promptly.
// Session affinity pins each stream to a known worker: the sessions are
// found by probing which worker's request counter moves.
#include <signal.h>

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

constexpr auto kDeadline = std::chrono::seconds(60);
// The streams on the killed worker could run for seconds more (4000 tokens),
// so they are certainly mid-stream when it dies.
constexpr int kLongTokens = 4000;
constexpr int kSurvivorTokens = 600;
constexpr int kQueuedTokens = 32;
// A cut stream must end this soon after the kill (a dead TCP peer is noticed
// at once on loopback; the deadline is 60 s).
constexpr double kEndBoundS = 5.0;

TEST(WorkerKillTest, CutStreamsEndUnavailableQueuedOnesAreRetriedAndNewOnesSucceed) {
  LocalCluster cluster(2, {"--max-num-seqs", "2", "--max-model-len", "4096"}, {"--max-retries", "2"});
  ASSERT_TRUE(cluster.ok());
  const std::string doomed = SessionOnWorker(cluster, 0);
  const std::string survivor = SessionOnWorker(cluster, 1);
  ASSERT_FALSE(doomed.empty());
  ASSERT_FALSE(survivor.empty());
  const std::string router_metrics = MetricsUrl(cluster.router());
  const std::string doomed_metrics = MetricsUrl(cluster.worker(0));
  const double retries_before = Metric(router_metrics, "floe_router_retries_total");
  ASSERT_FALSE(std::isnan(retries_before));

  auto stub = cluster.RouterStub();
  // Two long streams fill worker 0's batch; the third waits in its engine.
  std::vector<std::unique_ptr<BackgroundStream>> cut;
  for (int i = 0; i < 2; ++i) {
    cut.push_back(std::make_unique<BackgroundStream>(
        *stub, GreedyRequest(absl::StrCat("A long story, part ", i), kLongTokens, doomed), kDeadline));
    ASSERT_TRUE(cut.back()->WaitForTokens(1, std::chrono::seconds(20))) << "long stream " << i;
  }
  const floe::v1::GenerateRequest queued_request = GreedyRequest("Queued behind the batch", kQueuedTokens, doomed);
  BackgroundStream queued(*stub, queued_request, kDeadline);
  ASSERT_TRUE(WaitFor([&] { return Metric(doomed_metrics, "floe_num_requests_waiting") == 1; },
                      std::chrono::seconds(30)))
      << "the third request never queued on worker 0: waiting = " << Metric(doomed_metrics, "floe_num_requests_waiting")
      << ", running = " << Metric(doomed_metrics, "floe_num_requests_running");
  BackgroundStream unaffected(*stub, GreedyRequest("Meanwhile on the other worker", kSurvivorTokens, survivor),
                              kDeadline);
  ASSERT_TRUE(unaffected.WaitForTokens(1, std::chrono::seconds(20)));
  // The kill must find the cut streams mid-stream and the queued one unstarted.
  for (auto& s : cut) ASSERT_FALSE(s->done());
  ASSERT_EQ(queued.tokens(), 0);
  std::vector<int> tokens_before_kill;
  for (auto& s : cut) tokens_before_kill.push_back(s->tokens());

  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(cluster.worker(0).pid(), SIGKILL), 0);

  for (size_t i = 0; i < cut.size(); ++i) {
    const StreamOutcome& o = cut[i]->Join();
    const double after_kill = SecondsBetween(killed_at, o.ended);
    std::printf("[worker_kill] cut stream %zu: %d tokens before the kill, %zu in all, ended %.3f s after it: %d %s\n",
                i, tokens_before_kill[i], o.token_ids.size(), after_kill, o.status.error_code(),
                o.status.error_message().c_str());
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE) << o.status.error_message();
    // It names the worker and says the answer is cut, with gRPC's detail after.
    const std::string cut_at = absl::StrCat("worker ", cluster.worker_addresses()[0], " failed mid-stream after ");
    EXPECT_EQ(o.status.error_message().rfind(cut_at, 0), 0u) << o.status.error_message();
    EXPECT_NE(o.status.error_message().find(" tokens: "), std::string::npos) << o.status.error_message();
    EXPECT_FALSE(o.completed);
    EXPECT_LT(static_cast<int>(o.token_ids.size()), kLongTokens);
    EXPECT_LT(after_kill, kEndBoundS);
  }

  const StreamOutcome& q = queued.Join();
  std::printf("[worker_kill] queued request: %d %s, %zu tokens, first token %.3f s after the kill\n",
              q.status.error_code(), q.status.error_message().c_str(), q.token_ids.size(),
              q.got_tokens() ? SecondsBetween(killed_at, q.first_token) : -1.0);
  EXPECT_TRUE(q.status.ok()) << q.status.error_message();
  EXPECT_EQ(static_cast<int>(q.token_ids.size()), kQueuedTokens);
  EXPECT_TRUE(q.got_tokens() && q.first_token > killed_at) << "it streamed before the kill: not a queued request";
  const double retries = Metric(router_metrics, "floe_router_retries_total") - retries_before;
  std::printf("[worker_kill] router retries: %.0f\n", retries);
  EXPECT_GE(retries, 1);

  const StreamOutcome& u = unaffected.Join();
  std::printf("[worker_kill] stream on the surviving worker: %d, %zu tokens\n", u.status.error_code(),
              u.token_ids.size());
  EXPECT_TRUE(u.status.ok()) << u.status.error_message();
  EXPECT_EQ(static_cast<int>(u.token_ids.size()), kSurvivorTokens);

  // After the kill: every session (the dead worker's too) is served by the
  // other worker, and the retried request's output is what it gives anyway.
  Generation again = Generate(*stub, queued_request, 30000);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.token_ids, q.token_ids) << "the retried request's output differs from a fresh run";
  for (const std::string& session : {doomed, survivor, std::string()}) {
    Generation g = Generate(*stub, GreedyRequest("After the kill", 16, session), 30000);
    EXPECT_TRUE(g.status.ok()) << "session '" << session << "': " << g.status.error_message();
    EXPECT_EQ(g.token_ids.size(), 16u);
  }
  EXPECT_EQ(Metric(router_metrics, "floe_router_worker_healthy",
                   {absl::StrCat("worker=\"", cluster.worker_addresses()[0], "\"")}),
            0)
      << "the dead worker is still marked healthy";
  auto worker_label = [&](int i) { return absl::StrCat("worker=\"", cluster.worker_addresses()[i], "\""); };
  auto panic_picks = [&] {
    return Metric(router_metrics, "floe_router_worker_panic_picks_total", {worker_label(0)}) +
           Metric(router_metrics, "floe_router_worker_panic_picks_total", {worker_label(1)});
  };
  // Worker 1 stayed healthy unless a slow poll ejected it for a moment (a
  // busy host under a sanitizer); then a panic pick was right.
  if (Metric(router_metrics, "floe_router_worker_ejections_total", {worker_label(1)}) == 0)
    EXPECT_EQ(panic_picks(), 0) << "a worker was healthy all along, yet an ejected one was picked";
  const double panic_before = panic_picks();

  // Both dead: panic routing tries each ejected worker once (a refused
  // connection fails fast), then the request ends UNAVAILABLE, promptly.
  ASSERT_EQ(::kill(cluster.worker(1).pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Metric(router_metrics, "floe_router_worker_healthy", {worker_label(1)}) == 0; },
                      std::chrono::seconds(30)))
      << "the second dead worker is still marked healthy";
  const auto sent = Clock::now();
  Generation none = Generate(*stub, GreedyRequest("Nobody is left", 8, survivor), 30000);
  const double took = SecondsBetween(sent, Clock::now());
  std::printf("[worker_kill] both workers dead: %d %s after %.3f s; panic picks %.0f\n", none.status.error_code(),
              none.status.error_message().c_str(), took, panic_picks() - panic_before);
  EXPECT_EQ(none.status.error_code(), grpc::StatusCode::UNAVAILABLE) << none.status.error_message();
  EXPECT_LT(took, kEndBoundS);
  EXPECT_EQ(panic_picks() - panic_before, 2) << "each ejected worker should be tried once";
}

}  // namespace
}  // namespace floe::testing
