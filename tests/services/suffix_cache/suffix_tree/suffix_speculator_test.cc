#include "services/suffix_cache/suffix_tree/suffix_speculator.h"

#include <vector>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

using Str = std::vector<int32_t>;

TEST(SuffixSpeculatorTest, LifecycleErrors) {
  SuffixSpeculator spec({.max_depth = 8, .max_cached_requests = 4});
  EXPECT_EQ(spec.AppendTokens("a", {1}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(spec.StopRequest("a").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(spec.Speculate("a", {1, 2}, DraftParams()).ok());
  ASSERT_TRUE(spec.StartRequest("a", {1, 2, 3}).ok());
  EXPECT_EQ(spec.StartRequest("a", {1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(spec.StopRequest("a").ok());
  EXPECT_EQ(spec.EvictCachedResponse("zz").code(), absl::StatusCode::kNotFound);
}

TEST(SuffixSpeculatorTest, DraftsFromPromptAndFromOtherResponses) {
  SuffixSpeculator spec({.max_depth = 16, .max_cached_requests = -1});
  DraftParams p;
  p.max_spec_tokens = 4;
  // The prompt alone gives a draft for its own continuation.
  ASSERT_TRUE(spec.StartRequest("r1", {10, 11, 12, 13, 14, 10, 11}).ok());
  auto d = spec.Speculate("r1", Str{10, 11, 12, 13, 14, 10, 11}, p);
  ASSERT_TRUE(d.ok());
  // "10 11" occurs twice (once at the end): 12 at probability 1/2, and
  // the budget is the match length, 2.
  EXPECT_EQ(d->token_ids, (Str{12, 13}));
  ASSERT_TRUE(spec.AppendTokens("r1", {20, 21, 22, 23, 24}).ok());
  ASSERT_TRUE(spec.StopRequest("r1").ok());
  // A later request sees r1's response through the global tree.
  ASSERT_TRUE(spec.StartRequest("r2", {1, 20, 21}).ok());
  d = spec.Speculate("r2", Str{1, 20, 21}, p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->token_ids, (Str{22, 23}));  // budget = match length 2
  EXPECT_EQ(spec.global_tree().num_tokens(), 5);
}

TEST(SuffixSpeculatorTest, FifoEvictionNeverEvictsNewest) {
  SuffixSpeculator spec({.max_depth = 8, .max_cached_requests = 2});
  for (int i = 0; i < 3; ++i) {
    const std::string id = "r" + std::to_string(i);
    ASSERT_TRUE(spec.StartRequest(id, {1, 2}).ok());
    ASSERT_TRUE(spec.AppendTokens(id, {100 + i, 200 + i}).ok());
    ASSERT_TRUE(spec.StopRequest(id).ok());
  }
  EXPECT_EQ(spec.num_cached(), 2);
  EXPECT_EQ(spec.global_tree().CountOccurrences({100}), 0);  // r0 evicted
  EXPECT_EQ(spec.global_tree().CountOccurrences({101}), 1);
  // Restarting r1 replaces its cached response and moves it to the back.
  ASSERT_TRUE(spec.StartRequest("r1", {1}).ok());
  EXPECT_EQ(spec.global_tree().CountOccurrences({101}), 0);
  ASSERT_TRUE(spec.AppendTokens("r1", {7}).ok());
  ASSERT_TRUE(spec.StartRequest("r3", {1}).ok());  // evicts r2, not r1
  EXPECT_EQ(spec.global_tree().CountOccurrences({102}), 0);
  EXPECT_EQ(spec.global_tree().CountOccurrences({7}), 1);
  EXPECT_TRUE(spec.global_tree().CheckIntegrity().ok());
}

TEST(SuffixSpeculatorTest, LocalWinsTies) {
  SuffixSpeculator spec({.max_depth = 8, .max_cached_requests = -1});
  DraftParams p;
  p.max_spec_tokens = 1;
  ASSERT_TRUE(spec.StartRequest("old", {0}).ok());
  ASSERT_TRUE(spec.AppendTokens("old", {5, 6, 9, 5, 6}).ok());
  ASSERT_TRUE(spec.StopRequest("old").ok());
  // Local: "5 6" -> 7 at 1/2. Global: "5 6" -> 9 at 1/2. Tie: local.
  ASSERT_TRUE(spec.StartRequest("new", {1, 5, 6, 7, 2, 5, 6}).ok());
  auto d = spec.Speculate("new", Str{1, 5, 6, 7, 2, 5, 6}, p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->token_ids, (Str{7}));
}

}  // namespace
}  // namespace floe::suffix_cache
