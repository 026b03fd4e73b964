// --kv-cache-dtype through the real floe-worker: bf16 holds twice the blocks
// of the same --kv-cache-gb (GetLoad's total_blocks) and fp8_e4m3 four times
// (warning that its scales are 1.0 without a kv_cache_scheme), each serves
// greedy requests end to end; auto is bf16 for the bf16 tiny checkpoint;
// --kv-cache-gb 0 sizes the cache for 32768 tokens and says so; an unknown
// value stops the worker at start (exit 2).
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

int32_t TotalBlocks(const LocalCluster& cluster) {
  grpc::ClientContext context;
  floe::v1::LoadReport load;
  EXPECT_TRUE(cluster.WorkerStub(0)->GetLoad(&context, floe::v1::LoadRequest(), &load).ok());
  return load.total_blocks();
}

// Greedy twice through the router: the second prompt from the prefix cache.
void ServesGreedy(const LocalCluster& cluster) {
  floe::v1::GenerateRequest r;
  for (int32_t id : {9906, 11, 1917, 374, 264}) r.mutable_token_ids()->add_ids(id);
  r.mutable_stopping()->set_max_tokens(24);
  r.mutable_stopping()->set_ignore_eos(true);
  const Generation first = Generate(*cluster.RouterStub(), r);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.token_ids.size(), 24u);
  const Generation again = Generate(*cluster.RouterStub(), r);  // its prompt now from the prefix cache
  EXPECT_EQ(again.token_ids, first.token_ids);
}

std::string TempLog(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("floe_kvdtype_" + tag + "_" + std::to_string(getpid()) + ".log"))
      .string();
}

TEST(KvCacheDtypeTest, NarrowTypesHoldMoreBlocksAndServe) {
  int32_t f32_blocks = 0;
  {
    LocalCluster cluster(1, {"--kv-cache-dtype", "f32"});
    ASSERT_TRUE(cluster.ok());
    f32_blocks = TotalBlocks(cluster);
  }
  {
    LocalCluster cluster(1, {"--kv-cache-dtype", "bf16"});
    ASSERT_TRUE(cluster.ok());
    EXPECT_EQ(TotalBlocks(cluster), 2 * f32_blocks);
    ServesGreedy(cluster);
  }
  {
    // auto on a bf16 checkpoint: bf16, as vLLM keeps the model's dtype.
    LocalCluster cluster(1, {"--kv-cache-dtype", "auto"});
    ASSERT_TRUE(cluster.ok());
    EXPECT_EQ(TotalBlocks(cluster), 2 * f32_blocks);
  }
  const std::string log = TempLog("fp8");
  {
    LocalCluster cluster(1, {"--kv-cache-dtype", "fp8_e4m3"}, {}, {.wrap = LogTo(log)});
    ASSERT_TRUE(cluster.ok());
    EXPECT_EQ(TotalBlocks(cluster), 4 * f32_blocks);
    ServesGreedy(cluster);
  }
  const std::string text = ReadWholeFile(log);
  EXPECT_NE(text.find("\"event\":\"kv_cache_scales_default\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"kv_cache_dtype\":\"fp8_e4m3\""), std::string::npos) << text;
  std::filesystem::remove(log);
}

// --kv-cache-gb 0: room for at least 32768 tokens of the model (the tiny
// model's are small: no cap, and the 16 MiB floor gives more), in the
// kv_cache_budget line and the ready event.
TEST(KvCacheDtypeTest, AutoBudgetHolds32kTokensAndSaysSo) {
  const std::string log = TempLog("auto");
  {
    LocalCluster cluster(1, {"--kv-cache-gb", "0"}, {}, {.wrap = LogTo(log)});
    ASSERT_TRUE(cluster.ok());
    EXPECT_GE(static_cast<int64_t>(TotalBlocks(cluster)) * 16, 32768);
  }
  const std::string text = ReadWholeFile(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("\"event\":\"kv_cache_budget\"[^\n]*\"tokens\":([0-9]+)")))
      << text;
  EXPECT_GE(std::stoll(m[1]), 32768);
  ASSERT_TRUE(std::regex_search(text, m, std::regex("\"event\":\"ready\"[^\n]*\"kv_cache_tokens\":([0-9]+)")))
      << text;
  EXPECT_GE(std::stoll(m[1]), 32768);
  std::filesystem::remove(log);
}

TEST(KvCacheDtypeTest, AnUnknownDtypeStopsTheWorkerAtStart) {
  auto worker = Subprocess::Spawn({BinaryPath("floe-worker"), "--model", TinyModelDir(), "--port", "0",
                                   "--kv-cache-dtype", "fp16"});
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE(WaitFor([&] { return (*worker)->Exited(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(WIFEXITED((*worker)->exit_status()) && WEXITSTATUS((*worker)->exit_status()) == 2);
}

}  // namespace
}  // namespace floe::testing
