// Fault: the suffix-cache is SIGKILLed and restarted from its snapshot
// (issue 17, case 2).
//
// A worker drafting with --speculative suffix against a floe-suffix-cache
// that snapshots every second (--snapshot-dir, --snapshot-interval-s 1): the
// crash-recovery path a deployment relies on, since SIGKILL leaves no final
// snapshot. What is promised:
// - speculation is lossless whatever the cache does: the greedy outputs
//   (token ids and text bytes) are identical before the kill, while the cache
//   is down, and after the restart;
// - the cache being down costs drafts, never requests (the worker marks it
//   down: floe_suffix_cache_client_up 0);
// - the restarted cache holds the state of its last snapshot (GetStats: the
//   same namespaces, responses and tokens as just before the kill);
// - drafting resumes against the restarted cache: the worker reconnects
//   (floe_suffix_cache_client_up 1) and the service answers Steps with
//   non-empty drafts again (its drafts_total grows). The worker's accepted
//   draft tokens are printed per phase but prove little here: its suffix
//   proposer also drafts from each request's own tree, which a random-weight
//   model's looping greedy output feeds even while the cache is down.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

constexpr char kNamespace[] = "faults";

// Agent-like turns: each prompt is sent twice, so the second turn drafts
// from the first one's cached response.
std::vector<floe::v1::GenerateRequest> Workload() {
  std::vector<floe::v1::GenerateRequest> out;
  for (int agent = 0; agent < 3; ++agent) {
    const std::string prompt =
        absl::StrCat("Agent ", agent, ": read main.cc, run the tests, report. Tool output: ok ok ok. Next?");
    for (int turn = 0; turn < 2; ++turn) out.push_back(GreedyRequest(prompt, 40, absl::StrCat("agent-", agent)));
  }
  return out;
}

struct Output {
  std::vector<int32_t> ids;
  std::string text;
};

// Runs the workload one request at a time (greedy output does not depend on
// the batch, but one at a time keeps the phases small and comparable).
std::vector<Output> RunWorkload(floe::v1::Floe::Stub& stub) {
  std::vector<Output> out;
  for (const auto& request : Workload()) {
    Generation g = Generate(stub, request, 30000);
    EXPECT_TRUE(g.status.ok()) << g.status.error_message();
    out.push_back({g.token_ids, g.text});
  }
  return out;
}

void ExpectSameOutputs(const std::vector<Output>& want, const std::vector<Output>& got, const std::string& phase) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].ids, want[i].ids) << phase << ", request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << phase << ", request " << i << ": text bytes differ";
  }
}

struct NamespaceState {
  int64_t responses = 0;
  int64_t tokens = 0;
  bool operator==(const NamespaceState& o) const { return responses == o.responses && tokens == o.tokens; }
};
std::map<std::string, NamespaceState> Namespaces(const floe::v1::SuffixStats& stats) {
  std::map<std::string, NamespaceState> out;
  for (const auto& ns : stats.namespaces()) out[ns.namespace_()] = {ns.cached_responses(), ns.cached_tokens()};
  return out;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A fresh folder, removed with everything in it at the end of the test.
struct TempDir {
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  const std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("floe_faults_snap_", getpid())).string();
};

TEST(SuffixCacheRestartTest, OutputsStayIdenticalAndDraftsResumeFromTheSnapshot) {
  const TempDir temp;
  const std::string& dir = temp.path;
  SnapshottingSuffixCache cache(dir, /*interval_s=*/1);
  ASSERT_TRUE(cache.Start());
  LocalCluster cluster(1, {"--suffix-cache", cache.address(), "--num-speculative-tokens", "8",
                           "--speculative-default-namespace", kNamespace});
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  const std::string worker_metrics = MetricsUrl(cluster.worker(0));
  auto accepted = [&] {
    return Metric(worker_metrics, "floe_spec_decode_num_accepted_tokens_total", {"proposer=\"suffix\""});
  };
  auto cache_up = [&] { return Metric(worker_metrics, "floe_suffix_cache_client_up"); };

  // Before: the cache drafts and caches every response.
  const std::vector<Output> before = RunWorkload(*stub);
  const double accepted_before = accepted();
  // The worker ends requests at the cache asynchronously; wait for the last
  // End, then for a periodic snapshot taken after it.
  floe::v1::SuffixStats stats;
  ASSERT_TRUE(WaitFor([&] { return cache.Stats(&stats).ok() && stats.active_requests() == 0; },
                      std::chrono::seconds(10)));
  const int64_t settled_ms = NowUnixMs();
  ASSERT_TRUE(WaitFor([&] { return cache.Stats(&stats).ok() && stats.last_snapshot_unix_ms() > settled_ms; },
                      std::chrono::seconds(5)))
      << "no periodic snapshot";
  const auto snapshotted = Namespaces(stats);
  ASSERT_GT(snapshotted.count(kNamespace) ? snapshotted.at(kNamespace).responses : 0, 0);
  std::printf("[suffix_cache_restart] before the kill: %lld cached responses, %lld tokens; snapshot %ju bytes; "
              "accepted draft tokens %.0f\n",
              static_cast<long long>(stats.cached_responses()), static_cast<long long>(stats.cached_tokens()),
              static_cast<uintmax_t>(std::filesystem::file_size(cache.snapshot_path())), accepted_before);
  EXPECT_GT(accepted_before, 0) << "no draft accepted before the kill: the test would prove nothing";

  // During: SIGKILL (no final snapshot); requests go on without drafts from it.
  cache.Kill();
  const std::vector<Output> during = RunWorkload(*stub);
  ExpectSameOutputs(before, during, "cache down");
  EXPECT_TRUE(WaitFor([&] { return cache_up() == 0; }, std::chrono::seconds(5)))
      << "the worker never noticed the cache was down";
  const double accepted_during = accepted() - accepted_before;

  // After: restarted on its port from the snapshot folder.
  const auto restart_began = Clock::now();
  ASSERT_TRUE(cache.Restart());
  floe::v1::SuffixStats restored;
  ASSERT_TRUE(cache.Stats(&restored).ok());
  const double restore_s = SecondsSince(restart_began);
  EXPECT_EQ(Namespaces(restored), snapshotted) << "the restarted cache lost state";
  EXPECT_EQ(restored.cached_responses(), stats.cached_responses());
  EXPECT_EQ(restored.cached_tokens(), stats.cached_tokens());
  const int64_t drafts_at_restart = restored.drafts_total();
  const double accepted_at_restart = accepted();

  // The worker probes the restarted cache with backoff (2 s at most), so the
  // first requests after the restart may still go without it: rerun the
  // workload until the service drafts again, checking every output.
  int rounds = 0;
  floe::v1::SuffixStats now;
  const bool resumed = WaitFor(
      [&] {
        ++rounds;
        ExpectSameOutputs(before, RunWorkload(*stub), absl::StrCat("after the restart, round ", rounds));
        return cache_up() == 1 && cache.Stats(&now).ok() && now.drafts_total() > drafts_at_restart &&
               accepted() > accepted_at_restart;
      },
      std::chrono::seconds(30));
  std::printf("[suffix_cache_restart] restart + restore %.3f s: %lld responses, %lld tokens restored; "
              "worker's accepted draft tokens (cache and per-request trees): before %.0f, while down %.0f, after the "
              "restart %.0f (%d rounds); non-empty drafts from the restarted service %lld\n",
              restore_s, static_cast<long long>(restored.cached_responses()),
              static_cast<long long>(restored.cached_tokens()), accepted_before, accepted_during,
              accepted() - accepted_at_restart, rounds, static_cast<long long>(now.drafts_total() - drafts_at_restart));
  EXPECT_TRUE(resumed) << "drafting never resumed against the restarted cache";
}

}  // namespace
}  // namespace floe::testing
