// --kv-cache-dtype through the real floe-worker: bf16 holds twice the blocks
// of the same --kv-cache-gb (GetLoad's total_blocks), serves greedy requests
// end to end, and an unknown value stops the worker at start (exit 2).
#include <sys/wait.h>

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

TEST(KvCacheDtypeTest, Bf16HoldsTwiceTheBlocksAndServes) {
  int32_t f32_blocks = 0;
  {
    LocalCluster cluster(1, {"--kv-cache-dtype", "f32"});
    ASSERT_TRUE(cluster.ok());
    f32_blocks = TotalBlocks(cluster);
  }
  LocalCluster cluster(1, {"--kv-cache-dtype", "bf16"});
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(TotalBlocks(cluster), 2 * f32_blocks);
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

TEST(KvCacheDtypeTest, AnUnknownDtypeStopsTheWorkerAtStart) {
  auto worker = Subprocess::Spawn({BinaryPath("floe-worker"), "--model", TinyModelDir(), "--port", "0",
                                   "--kv-cache-dtype", "fp16"});
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE(WaitFor([&] { return (*worker)->Exited(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(WIFEXITED((*worker)->exit_status()) && WEXITSTATUS((*worker)->exit_status()) == 2);
}

}  // namespace
}  // namespace floe::testing
