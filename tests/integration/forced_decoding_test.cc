// Forced decoding through real processes: client -> floe-router ->
// floe-worker (--benchmark-forced-decoding, suffix drafts from a real
// floe-suffix-cache) -> back. The forced ids come out unchanged, drafts are
// verified against them (a repeated request takes far fewer steps), bad ids
// are INVALID_ARGUMENT, and a worker without the flag refuses such requests
// with FAILED_PRECONDITION and keeps serving.
#include <random>

#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using floe::v1::GenerateRequest;

GenerateRequest ForcedRequest(const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced) {
  GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  r.mutable_stopping()->set_max_tokens(static_cast<int32_t>(forced.size()));
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_forced_output_ids()->Assign(forced.begin(), forced.end());
  return r;
}

TEST(ForcedDecodingClusterTest, ForcedIdsFlowThroughAndDraftsAreJudgedAgainstThem) {
  SuffixCacheProcess cache;
  ASSERT_TRUE(cache.Start());
  LocalCluster cluster(1, {"--speculative", "suffix", "--num-speculative-tokens", "16", "--suffix-cache",
                           cache.address(), "--benchmark-forced-decoding"});
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();

  std::mt19937 rng(3);
  std::vector<int32_t> prompt(40), forced(200);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 128000);
  for (int32_t& t : forced) t = static_cast<int32_t>(rng() % 128000);
  Generation first = Generate(*stub, ForcedRequest(prompt, forced));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.token_ids, forced);
  EXPECT_EQ(first.complete.finish_reason(), floe::v1::FINISH_REASON_LENGTH);
  // Nothing to copy from yet: about one step per token.
  EXPECT_GT(first.chunks, 150);
  // The same request again: its first response is in the global trees, so
  // drafts of up to 16 tokens are accepted (>= 8x fewer steps).
  Generation again = Generate(*stub, ForcedRequest(prompt, forced));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.token_ids, forced);
  EXPECT_LE(again.chunks, 25) << "drafts were not judged against the forced ids";

  std::vector<int32_t> bad = forced;
  bad[7] = 200000;
  Generation invalid = Generate(*stub, ForcedRequest(prompt, bad));
  EXPECT_EQ(invalid.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(invalid.status.error_message().find("forced_output_ids[7]"), std::string::npos)
      << invalid.status.error_message();
}

TEST(ForcedDecodingClusterTest, WorkerWithoutTheFlagRefusesAndKeepsServing) {
  LocalCluster cluster(1);
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  const std::vector<int32_t> prompt = {791, 6864, 315, 9822, 374};
  Generation refused = Generate(*stub, ForcedRequest(prompt, {11, 12, 13}));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.status.error_message().find("--benchmark-forced-decoding"), std::string::npos)
      << refused.status.error_message();
  GenerateRequest plain = ForcedRequest(prompt, {});
  plain.mutable_stopping()->set_max_tokens(5);
  Generation served = Generate(*stub, plain);
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.token_ids.size(), 5u);
}

}  // namespace
}  // namespace floe::testing
