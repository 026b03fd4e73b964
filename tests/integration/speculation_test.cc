// Speculative decoding through the real binaries (router, worker,
// floe-suffix-cache on loopback): output is byte-identical to --speculative
// off for ngram and suffix, greedy and seeded, and drafts are accepted on
// repeated agent prompts (the worker's /metrics say so). Faults: the
// suffix-cache SIGKILLed, restarted on the same port and SIGSTOPped mid-run
// only cost drafts; the worker marks it down, probes with backoff and uses it
// again once it answers.
#include <signal.h>

#include <atomic>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"
#include "floe/v1/suffix_cache.grpc.pb.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using floe::v1::GenerateRequest;

// The load: distinct prompts, agent sessions re-sending the same prompt (the
// suffix tree then holds the earlier response), and seeded sampling.
std::vector<GenerateRequest> Workload() {
  std::vector<GenerateRequest> out;
  auto add = [&](const std::string& text, int max_tokens, const std::string& session) {
    GenerateRequest r;
    r.set_text(text);
    r.set_session_id(session);
    r.mutable_stopping()->set_max_tokens(max_tokens);
    r.mutable_stopping()->set_ignore_eos(true);
    out.push_back(r);
    return &out.back();
  };
  const char* topics[] = {"the weather in Lisbon", "sorting a list in C++", "why the sky is blue",
                          "a haiku about gRPC", "prime numbers below fifty", "how a suffix tree works"};
  // 64 tokens: a random-weight model's greedy text only repeats itself (what
  // prompt lookup drafts from) once it falls into a loop, which takes a while.
  for (int i = 0; i < 6; ++i) add(absl::StrCat("Tell me about ", topics[i], "."), 64, "");
  for (int session = 0; session < 3; ++session) {
    const std::string prompt = absl::StrCat("Agent step ", session, ": read file main.cc, then list the tests. ",
                                            "Tool output: ok ok ok. Next action?");
    for (int turn = 0; turn < 3; ++turn) add(prompt, 32, absl::StrCat("agent-", session));
  }
  for (int i = 0; i < 4; ++i) {
    GenerateRequest* r = add(absl::StrCat("Sample a story about ", topics[i]), 20, "");
    r->mutable_sampling()->set_temperature(0.8f);
    r->mutable_sampling()->set_top_p(0.95f);
    r->mutable_sampling()->set_seed(100 + i);
  }
  return out;
}

// Runs `requests` on `threads` concurrent clients; tokens per request index.
std::vector<std::vector<int32_t>> RunAll(floe::v1::Floe::Stub& stub, const std::vector<GenerateRequest>& requests,
                                         int threads) {
  std::vector<std::vector<int32_t>> out(requests.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < requests.size(); i = next++) {
        Generation g = Generate(stub, requests[i]);
        EXPECT_TRUE(g.status.ok()) << "request " << i << ": " << g.status.error_message();
        out[i] = g.token_ids;
      }
    });
  }
  for (auto& t : pool) t.join();
  return out;
}

const std::vector<std::vector<int32_t>>& Baseline() {
  static const auto* baseline = [] {
    LocalCluster cluster(1, {"--speculative", "off"});
    EXPECT_TRUE(cluster.ok());
    auto stub = cluster.RouterStub();
    return new std::vector<std::vector<int32_t>>(RunAll(*stub, Workload(), 1));
  }();
  return *baseline;
}

std::map<std::string, double> Scrape(const std::string& url) {
  auto body = HttpGet(url);
  if (!body.ok()) return {};
  return ParsePrometheusText(*body);
}

std::vector<std::string> SpeculativeArgs(const std::string& method, const std::string& suffix_cache = "") {
  std::vector<std::string> args = {"--speculative", method, "--num-speculative-tokens", "8"};
  if (!suffix_cache.empty()) args.insert(args.end(), {"--suffix-cache", suffix_cache});
  return args;
}

void ExpectLosslessWithAcceptedDrafts(LocalCluster& cluster, const std::string& proposer) {
  const auto& want = Baseline();
  auto stub = cluster.RouterStub();
  const auto got = RunAll(*stub, Workload(), 3);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(want[i].empty());
    EXPECT_EQ(got[i], want[i]) << proposer << ", request " << i;
  }
  const auto samples = Scrape(MetricsUrl(cluster.worker(0)));
  const std::string label = absl::StrCat("proposer=\"", proposer, "\"");
  const double drafts = SumByLabels(samples, "floe_spec_decode_num_drafts_total", {label});
  const double accepted = SumByLabels(samples, "floe_spec_decode_num_accepted_tokens_total", {label});
  EXPECT_GT(drafts, 0);
  EXPECT_GT(accepted, 0) << proposer << ": no draft token accepted";
  // The accepted-length histogram is the same verification seen per draft.
  EXPECT_EQ(SumByLabels(samples, "floe_spec_decode_accepted_length_count", {label}), drafts);
  EXPECT_EQ(SumByLabels(samples, "floe_spec_decode_accepted_length_sum", {label}), accepted);
  EXPECT_EQ(SumByLabels(samples, "floe_spec_decode_accepted_length_bucket", {label, "le=\"+Inf\""}), drafts);
  // Drafts accepting no token: all drafts minus those whose first token was.
  EXPECT_EQ(SumByLabels(samples, "floe_spec_decode_accepted_length_bucket", {label, "le=\"0\""}),
            drafts - SumByLabels(samples, "floe_spec_decode_num_accepted_tokens_per_pos_total", {label, "position=\"0\""}));
}

TEST(SpeculationTest, NgramIsLosslessAndAcceptsDrafts) {
  LocalCluster cluster(1, SpeculativeArgs("ngram"));
  ASSERT_TRUE(cluster.ok());
  ExpectLosslessWithAcceptedDrafts(cluster, "ngram");
}

TEST(SpeculationTest, SuffixWithSuffixCacheIsLosslessAndUsesTheService) {
  SuffixCacheProcess cache;
  ASSERT_TRUE(cache.Start());
  // No --speculative: with a suffix-cache the worker's default is suffix.
  // Requests that name no namespace go to the worker's default (the Helm
  // chart sets it to the served model's name).
  LocalCluster cluster(1, {"--suffix-cache", cache.address(), "--num-speculative-tokens", "8",
                           "--speculative-default-namespace", "tenant-a"});
  ASSERT_TRUE(cluster.ok());
  ExpectLosslessWithAcceptedDrafts(cluster, "suffix");
  {
    auto service = floe::v1::SuffixCache::NewStub(
        grpc::CreateChannel(cache.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    floe::v1::SuffixStats stats;
    ASSERT_TRUE(service->GetStats(&context, floe::v1::SuffixStatsRequest(), &stats).ok());
    std::map<std::string, int64_t> cached;
    for (const auto& ns : stats.namespaces()) cached[ns.namespace_()] = ns.cached_responses();
    EXPECT_GT(cached["tenant-a"], 0);
    for (const auto& [name, count] : cached) EXPECT_TRUE(name == "tenant-a" || count == 0) << name << ": " << count;
  }
  const auto samples = Scrape(MetricsUrl(cluster.worker(0)));
  const double steps = SumByLabels(samples, "floe_suffix_cache_client_rpc_latency_seconds_count", {"call=\"step\""});
  EXPECT_GT(steps, 0);
  // A request registers with the service when it is first asked for a draft
  // (or is skipped while a loaded machine made Steps late enough to mark the
  // replica down); the draft budget may never ask a request that its
  // measured acceptance does not pay for, so some requests never register.
  const double starts = SumByLabels(samples, "floe_suffix_cache_client_rpc_latency_seconds_count", {"call=\"start\""});
  EXPECT_GT(starts, 0);
  EXPECT_LE(starts + SumByLabels(samples, "floe_suffix_cache_client_skipped_calls_total", {"call=\"start\""}),
            Workload().size());
  EXPECT_EQ(SumByLabels(samples, "floe_suffix_cache_client_rpc_failures_total", {"reason=\"unavailable\""}), 0);
}

// Clients loop over the workload until stopped, checking every output
// against the baseline.
class Load {
 public:
  Load(floe::v1::Floe::Stub& stub, int threads) {
    const auto& want = Baseline();
    for (int t = 0; t < threads; ++t) {
      pool_.emplace_back([this, &stub, &want, t] {
        const auto requests = Workload();
        for (size_t i = t; !stop_; i = (i + 1) % requests.size()) {
          Generation g = Generate(stub, requests[i]);
          if (!g.status.ok() || g.token_ids != want[i]) ++mismatches_;
          ++done_;
        }
      });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : pool_) if (t.joinable()) t.join();
  }
  int done() const { return done_; }
  int mismatches() const { return mismatches_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> done_{0}, mismatches_{0};
  std::vector<std::thread> pool_;
};

TEST(SpeculationFaultTest, SuffixCacheKilledRestartedAndStoppedOnlyCostsDrafts) {
  Baseline();
  SuffixCacheProcess cache;
  ASSERT_TRUE(cache.Start());
  LocalCluster cluster(1, SpeculativeArgs("suffix", cache.address()));
  ASSERT_TRUE(cluster.ok());
  const std::string url = MetricsUrl(cluster.worker(0));
  ASSERT_FALSE(url.empty());
  auto metric = [&](const std::string& name, const std::vector<std::string>& labels = {}) {
    return SumByLabels(Scrape(url), name, labels);
  };
  // Successful Step calls: observed minus failed.
  auto good_steps = [&] {
    const auto s = Scrape(url);
    return SumByLabels(s, "floe_suffix_cache_client_rpc_latency_seconds_count", {"call=\"step\""}) -
           SumByLabels(s, "floe_suffix_cache_client_rpc_failures_total", {"call=\"step\""});
  };
  auto stub = cluster.RouterStub();
  Load load(*stub, 2);
  ASSERT_TRUE(WaitFor([&] { return good_steps() > 0; }, std::chrono::seconds(30))) << "no Step reached the service";

  // SIGKILL: the worker marks it down and keeps decoding.
  cache.Kill();
  ASSERT_TRUE(WaitFor([&] { return metric("floe_suffix_cache_client_up") == 0; }, std::chrono::seconds(20)));
  EXPECT_GE(metric("floe_suffix_cache_client_unreachable_total"), 1);
  int done_while_down = load.done();
  ASSERT_TRUE(WaitFor([&] { return load.done() >= done_while_down + 4; }, std::chrono::seconds(30)))
      << "decoding stalled while the suffix-cache was down";

  // Restart on the same port: a probe finds it, Steps succeed again.
  ASSERT_TRUE(cache.Restart());
  ASSERT_TRUE(WaitFor([&] { return metric("floe_suffix_cache_client_up") == 1; }, std::chrono::seconds(30)))
      << "never reconnected";
  EXPECT_GE(metric("floe_suffix_cache_client_reconnect_attempts_total"), 1);
  const double steps_after_restart = good_steps();
  ASSERT_TRUE(WaitFor([&] { return good_steps() > steps_after_restart; }, std::chrono::seconds(30)))
      << "no successful Step after the restart";

  // SIGSTOP: calls time out instead of failing; the engine never waits long
  // for them (one Step deadline, never a lifecycle call).
  const double went_down = metric("floe_suffix_cache_client_unreachable_total");
  ::kill(cache.process().pid(), SIGSTOP);
  ASSERT_TRUE(WaitFor([&] { return metric("floe_suffix_cache_client_up") == 0; }, std::chrono::seconds(20)));
  EXPECT_GT(metric("floe_suffix_cache_client_rpc_failures_total", {"reason=\"timeout\""}), 0);
  done_while_down = load.done();
  ASSERT_TRUE(WaitFor([&] { return load.done() >= done_while_down + 4; }, std::chrono::seconds(30)))
      << "decoding stalled while the suffix-cache was stopped";
  ::kill(cache.process().pid(), SIGCONT);
  ASSERT_TRUE(WaitFor([&] { return metric("floe_suffix_cache_client_up") == 1; }, std::chrono::seconds(30)));
  load.Stop();

  EXPECT_EQ(load.mismatches(), 0) << "of " << load.done() << " requests";
  const auto s = Scrape(url);
  // Every Step call ended within its 5 ms deadline plus scheduling slack.
  EXPECT_EQ(SumByLabels(s, "floe_suffix_cache_client_rpc_latency_seconds_bucket", {"call=\"step\"", "le=\"0.1\""}),
            SumByLabels(s, "floe_suffix_cache_client_rpc_latency_seconds_count", {"call=\"step\""}));
  EXPECT_GT(SumByLabels(s, "floe_suffix_cache_client_unreachable_total"), went_down);
  EXPECT_GT(SumByLabels(s, "floe_suffix_cache_client_skipped_calls_total"), 0);
}

}  // namespace
}  // namespace floe::testing
