// A real Prometheus server scrapes the running services; the counters it
// reports must equal the load we sent, every histogram must have seen every
// request, and the latency histograms must agree with what the client
// measured and with each other (one clock per request). Every query of the
// Grafana dashboard must return data.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "common/metrics/http_get.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

namespace fs = std::filesystem;

// Prometheus scrapes every second: how long a value may take to show.
constexpr std::chrono::seconds kScrapeWait(30);

std::string HostPort(const std::string& url) {
  std::string rest = url.substr(std::string("http://").size());
  return rest.substr(0, rest.find('/'));
}

class Prometheus {
 public:
  Prometheus(const std::vector<std::string>& targets) {
    dir_ = fs::temp_directory_path() / ("floe_prom_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ofstream config(dir_ / "prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
           << "  - job_name: floe\n    static_configs:\n      - targets: [";
    for (size_t i = 0; i < targets.size(); ++i) config << (i ? ", " : "") << "'" << targets[i] << "'";
    config << "]\n";
    config.close();
    // Port 0 is not an option for Prometheus: pick one from the pid.
    port_ = 20000 + getpid() % 20000;
    auto spawned = Subprocess::Spawn({"/usr/bin/prometheus", "--config.file=" + (dir_ / "prometheus.yml").string(),
                                      "--storage.tsdb.path=" + (dir_ / "data").string(),
                                      absl::StrCat("--web.listen-address=127.0.0.1:", port_), "--log.level=warn"});
    if (spawned.ok()) process_ = std::move(spawned).value();
  }
  ~Prometheus() {
    if (process_) process_->Terminate(std::chrono::seconds(5));
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // The instant-vector result of `promql`, or an error.
  absl::StatusOr<nlohmann::json> Query(const std::string& promql) {
    auto body = HttpGet(absl::StrCat("http://127.0.0.1:", port_, "/api/v1/query?query=", UrlEncode(promql)));
    if (!body.ok()) return body.status();
    nlohmann::json reply = nlohmann::json::parse(*body, nullptr, false);
    if (reply.is_discarded() || reply["status"] != "success") return absl::InternalError("query failed: " + *body);
    return reply["data"]["result"];
  }

  // Sum over series of `promql` (NaN when no data).
  double Scalar(const std::string& promql) {
    auto result = Query(absl::StrCat("sum(", promql, ")"));
    if (!result.ok() || result->empty()) return std::nan("");
    return std::stod((*result)[0]["value"][1].get<std::string>());
  }

 private:
  fs::path dir_;
  int port_;
  std::unique_ptr<Subprocess> process_;
};

TEST(PrometheusTest, CountersEqualTheLoadAndDashboardQueriesReturnData) {
  LocalCluster cluster(2, {"--speculative", "ngram"});
  ASSERT_TRUE(cluster.ok());
  std::vector<std::string> targets = {HostPort(MetricsUrl(cluster.router()))};
  for (int i = 0; i < 2; ++i) targets.push_back(HostPort(MetricsUrl(cluster.worker(i))));
  for (const auto& t : targets) ASSERT_FALSE(t.empty());
  Prometheus prometheus(targets);
  ASSERT_TRUE(WaitFor([&] { return prometheus.Scalar("up") == 3.0; }, kScrapeWait)) << "targets not up";

  // Known load: 10 requests of 12 tokens each, 3 rejected for bad input.
  auto stub = cluster.RouterStub();
  int prompt_tokens = 0;
  double client_ttft = 0, client_e2e = 0;
  for (int i = 0; i < 10; ++i) {
    floe::v1::GenerateRequest r;
    r.set_text(absl::StrCat("request number ", i, " for the metrics test"));
    r.set_session_id(absl::StrCat("s", i));
    r.mutable_stopping()->set_max_tokens(12);
    r.mutable_stopping()->set_ignore_eos(true);
    Generation g = Generate(*stub, r);
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    prompt_tokens += g.complete.usage().prompt_tokens();
    client_ttft += g.ttft_s;
    client_e2e += g.e2e_s;
  }
  for (int i = 0; i < 3; ++i) {
    floe::v1::GenerateRequest bad;
    bad.set_text("");
    EXPECT_EQ(Generate(*stub, bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }

  // A scrape taken while the last requests finished may hold the engine's
  // counters but not yet their histograms: wait for both.
  ASSERT_TRUE(WaitFor(
      [&] {
        return prometheus.Scalar("floe_generation_tokens_total") == 120.0 &&
               prometheus.Scalar("floe_e2e_request_latency_seconds_count") == 10.0;
      },
      kScrapeWait))
      << "generation tokens: " << prometheus.Scalar("floe_generation_tokens_total");
  EXPECT_TRUE(WaitFor(
      [&] {
        return prometheus.Scalar("floe_router_requests_total{code=\"OK\"}") == 10.0 &&
               prometheus.Scalar("floe_router_requests_total{code=\"INVALID_ARGUMENT\"}") == 3.0;
      },
      kScrapeWait));
  EXPECT_EQ(prometheus.Scalar("floe_request_success_total{finished_reason=\"length\"}"), 10.0);
  EXPECT_EQ(prometheus.Scalar("floe_time_to_first_token_seconds_count"), 10.0);
  EXPECT_EQ(prometheus.Scalar("floe_e2e_request_latency_seconds_count"), 10.0);
  EXPECT_EQ(prometheus.Scalar("floe_router_time_to_first_token_seconds_count"), 10.0);
  // 11 gaps per 12-token request.
  EXPECT_EQ(prometheus.Scalar("floe_inter_token_latency_seconds_count"), 110.0);
  EXPECT_EQ(prometheus.Scalar("floe_request_generation_tokens_sum"), 120.0);
  EXPECT_EQ(prometheus.Scalar("floe_request_prompt_tokens_sum"), prompt_tokens);
  EXPECT_EQ(prometheus.Scalar("floe_router_worker_healthy"), 2.0);
  EXPECT_EQ(prometheus.Scalar("floe_num_requests_running"), 0.0);
  EXPECT_EQ(prometheus.Scalar("floe_cache_config_info{block_size=\"16\"}"), 2.0);  // one per worker

  // Values, not only counts. The worker's timeline lies inside the client's:
  // its TTFT and E2E are at most the client's (plus clock granularity) and
  // well above zero; within the worker one clock gives e2e = queue + prefill
  // + decode, TTFT = queue + prefill, decode = the ITL gaps, and TPOT =
  // decode / (tokens - 1).
  const double ttft = prometheus.Scalar("floe_time_to_first_token_seconds_sum");
  const double e2e = prometheus.Scalar("floe_e2e_request_latency_seconds_sum");
  const double queue = prometheus.Scalar("floe_request_queue_time_seconds_sum");
  const double prefill = prometheus.Scalar("floe_request_prefill_time_seconds_sum");
  const double decode = prometheus.Scalar("floe_request_decode_time_seconds_sum");
  const double inference = prometheus.Scalar("floe_request_inference_time_seconds_sum");
  const double itl = prometheus.Scalar("floe_inter_token_latency_seconds_sum");
  const double tpot = prometheus.Scalar("floe_request_time_per_output_token_seconds_sum");
  const double tolerance = 1e-6 * 10;  // seconds, over 10 requests
  EXPECT_GT(ttft, 0.0);
  EXPECT_LE(ttft, client_ttft + 0.001 * 10);
  EXPECT_LE(e2e, client_e2e + 0.001 * 10);
  EXPECT_GT(e2e, 0.25 * client_e2e) << "server e2e " << e2e << " s, client " << client_e2e << " s";
  EXPECT_LE(ttft, e2e);
  EXPECT_GT(decode, 0.0);
  EXPECT_NEAR(queue + prefill + decode, e2e, tolerance);
  EXPECT_NEAR(queue + prefill, ttft, tolerance);
  EXPECT_NEAR(prefill + decode, inference, tolerance);
  EXPECT_NEAR(itl, decode, tolerance);
  EXPECT_NEAR(tpot, decode / 11, tolerance);  // every request: 12 tokens, 11 gaps

  // Every dashboard query must return data (tests/deploy/dashboard_queries.py lists them).
  const char* src = std::getenv("FLOE_SOURCE_DIR");
  const std::string lister = std::string(src ? src : ".") + "/tests/deploy/dashboard_queries.py";
  ASSERT_TRUE(fs::exists(lister)) << lister;
  {
    const std::string out = (fs::temp_directory_path() / ("floe_queries_" + std::to_string(getpid()))).string();
    ASSERT_EQ(std::system(("/usr/bin/python3 " + lister + " > " + out).c_str()), 0);
    std::ifstream in(out);
    std::string promql;
    int checked = 0, empty = 0;
    while (std::getline(in, promql)) {
      if (promql.empty()) continue;
      auto result = prometheus.Query(promql);
      ASSERT_TRUE(result.ok()) << promql << ": " << result.status();
      ++checked;
      // This cluster has no suffix-cache service (its panels have nothing to
      // read); every other panel must, speculation included (ngram drafts).
      const bool absent = promql.find("suffix_cache") != std::string::npos;
      if (result->empty() && !absent) {
        ADD_FAILURE() << "no data for dashboard query: " << promql;
        ++empty;
      }
    }
    fs::remove(out);
    EXPECT_GT(checked, 5);
  }
}

}  // namespace
}  // namespace floe::testing
