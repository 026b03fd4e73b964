// The weight cache through the real binaries: a worker started with
// --weight-cache DIR writes its packed weights there, the next worker on the
// same checkpoint maps them (its /metrics say which, with the start-up
// phases), and both answer greedy requests token for token as a worker
// without the cache does. A cache file that is not for these weights is a
// miss, never used.
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

namespace fs = std::filesystem;
using floe::v1::GenerateRequest;

struct Served {
  std::vector<std::vector<int32_t>> tokens;  // per prompt, greedy
  std::map<std::string, double> metrics;     // the worker's /metrics
};

Served Serve(const std::vector<std::string>& worker_args) {
  Served out;
  LocalCluster cluster(1, worker_args);
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return out;
  auto stub = cluster.RouterStub();
  for (const char* prompt : {"The weight cache keeps", "Mapped, not repacked: a second start"}) {
    GenerateRequest r;
    r.set_text(prompt);
    r.mutable_stopping()->set_max_tokens(12);
    r.mutable_stopping()->set_ignore_eos(true);
    Generation g = Generate(*stub, r);
    EXPECT_TRUE(g.status.ok()) << g.status.error_message();
    out.tokens.push_back(g.token_ids);
  }
  auto body = HttpGet(MetricsUrl(cluster.worker(0)));
  EXPECT_TRUE(body.ok()) << body.status();
  if (body.ok()) out.metrics = ParsePrometheusText(*body);
  return out;
}

double Outcome(const Served& s, const std::string& outcome) {
  const auto it = s.metrics.find(absl::StrCat("floe_weight_cache{model_name=\"", fs::path(TinyModelDir()).filename().string(),
                                              "\",outcome=\"", outcome, "\"}"));
  return it == s.metrics.end() ? 0.0 : it->second;
}

TEST(WeightCacheClusterTest, WrittenThenMappedWithTheSameTokens) {
  const std::string dir = (fs::temp_directory_path() / ("floe_weight_cache_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  const Served plain = Serve({"--weight-cache", "off"});
  const Served first = Serve({"--weight-cache", dir});
  ASSERT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "one file, no temporaries";
  const Served second = Serve({"--weight-cache", dir});
  EXPECT_EQ(Outcome(plain, "off"), 1.0);
  EXPECT_EQ(Outcome(first, "written"), 1.0);
  EXPECT_EQ(Outcome(second, "hit"), 1.0);
  ASSERT_EQ(plain.tokens.size(), 2u);
  EXPECT_EQ(first.tokens, plain.tokens);
  EXPECT_EQ(second.tokens, plain.tokens);
  // The start-up phases reach Prometheus too.
  const std::string name = fs::path(TinyModelDir()).filename().string();
  for (const char* phase : {"init", "grpc_start", "read", "map_weights", "kv_allocation", "total"})
    EXPECT_TRUE(second.metrics.count(
        absl::StrCat("floe_startup_phase_seconds{model_name=\"", name, "\",phase=\"", phase, "\"}")))
        << phase;
  EXPECT_TRUE(first.metrics.count(absl::StrCat("floe_startup_phase_seconds{model_name=\"", name, "\",phase=\"repack\"}")));

  // A file of the right name whose key is another's: a miss (rewritten), and
  // the tokens are still the checkpoint's.
  const fs::path file = fs::directory_iterator(dir)->path();
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t key_at = bytes.find("rank 0 of 1 x 1");
  ASSERT_NE(key_at, std::string::npos);
  bytes[key_at + 5] = '7';  // "rank 7 of 1 x 1"
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  const Served foreign = Serve({"--weight-cache", dir});
  EXPECT_EQ(Outcome(foreign, "written"), 1.0);
  EXPECT_EQ(foreign.tokens, plain.tokens);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace floe::testing
