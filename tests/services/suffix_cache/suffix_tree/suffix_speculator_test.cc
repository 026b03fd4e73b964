#include "services/suffix_cache/suffix_tree/suffix_speculator.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

using Str = std::vector<int32_t>;

// Runs request `id` with `prompt`, drafts once from `context`, appends
// `response` and stops; returns the draft.
Draft RunOnce(SuffixSpeculator& spec, const std::string& id, const Str& prompt,
              const Str& response) {
  DraftParams p;
  p.max_spec_tokens = 8;
  EXPECT_TRUE(spec.StartRequest(id, prompt).ok());
  absl::StatusOr<Draft> d = spec.Speculate(id, prompt, p);
  EXPECT_TRUE(d.ok());
  EXPECT_TRUE(spec.AppendTokens(id, response).ok());
  EXPECT_TRUE(spec.StopRequest(id).ok());
  return d.ok() ? *d : Draft();
}

// A response whose drafts were accepted outlives an older unused one under
// kUsage; under kFifo the oldest goes regardless.
TEST(SuffixSpeculatorTest, UsageEvictionKeepsResponsesThatPaidOff) {
  Str x, y, z;
  for (int i = 0; i < 20; ++i) {
    x.push_back(100 + i);
    y.push_back(200 + i);
    z.push_back(300 + i);
  }
  for (EvictionKind kind : {EvictionKind::kFifo, EvictionKind::kUsage}) {
    SuffixSpeculator spec({.max_depth = 16, .max_cached_requests = 3, .eviction = kind});
    RunOnce(spec, "a", {1}, x);
    RunOnce(spec, "b", {2}, y);
    // c's prompt starts x: the draft continues x from a's cached response,
    // and c's response confirms it.
    const Draft d = RunOnce(spec, "c", {100, 101, 102, 103, 104}, {105, 106, 107, 108, 109, 110});
    EXPECT_EQ(d.token_ids, (Str{105, 106, 107, 108}));  // budget: match length 4
    EXPECT_GE(d.source_seq, 0);
    RunOnce(spec, "d", {3}, z);  // four responses: one must go
    EXPECT_EQ(spec.num_cached(), 3);
    EXPECT_EQ(spec.num_evictions(), 1);
    const bool a_cached = spec.EvictCachedResponse("a").ok();
    const bool b_cached = spec.EvictCachedResponse("b").ok();
    EXPECT_EQ(a_cached, kind == EvictionKind::kUsage) << EvictionKindName(kind);
    EXPECT_EQ(b_cached, kind == EvictionKind::kFifo) << EvictionKindName(kind);
  }
}

// Local drafts name no cached response.
TEST(SuffixSpeculatorTest, LocalDraftsHaveNoSource) {
  SuffixSpeculator spec({.max_depth = 16, .max_cached_requests = 4});
  const Draft d = RunOnce(spec, "a", {5, 6, 7, 8, 5, 6}, {7});
  EXPECT_FALSE(d.token_ids.empty());
  EXPECT_EQ(d.source_seq, -1);
}

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

// The confident extension (past the match-length budget) follows the
// request's own record: a request whose drafts are accepted extends, one
// whose drafts were mostly rejected keeps to the budget, though its last
// draft was accepted in full.
TEST(SuffixSpeculatorTest, ConfidentExtensionNeedsTheRequestsAcceptance) {
  Str prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(100 + i);
  prompt.push_back(7);
  DraftParams p;
  p.max_spec_tokens = 8;
  p.extend_past_depth = true;
  p.discount_own_suffix = true;
  p.confident_prob = 0.99f;
  p.confident_min_match = 2;
  // "7 100 .." is not in the prompt: the longest match is "100 101 102"
  // (budget 3), then "100 .. 103" (budget 4), each a single occurrence
  // (probability 1.0).
  const Str three = {7, 100, 101, 102};
  const Str four = {7, 100, 101, 102, 103};
  const Str extended = {104, 105, 106, 107, 108, 109, 110, 111};
  for (const float min_acceptance : {0.0f, 0.5f}) {
    p.confident_min_acceptance = min_acceptance;
    SuffixSpeculator spec({.max_depth = 64, .max_cached_requests = 0});
    // "good": its one draft was accepted in full.
    ASSERT_TRUE(spec.StartRequest("good", prompt).ok());
    absl::StatusOr<Draft> d = spec.Speculate("good", three, p);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->token_ids, (Str{103, 104, 105}));
    ASSERT_TRUE(spec.AppendTokens("good", {103, 104, 105, 106}).ok());
    d = spec.Speculate("good", four, p);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->token_ids, extended) << "must extend, min acceptance " << min_acceptance;
    // "bad": six drafts rejected, then one accepted in full (recent
    // acceptance about 0.46 with the prior).
    ASSERT_TRUE(spec.StartRequest("bad", prompt).ok());
    for (int i = 0; i < 6; ++i) {
      d = spec.Speculate("bad", three, p);
      ASSERT_TRUE(d.ok());
      ASSERT_EQ(d->token_ids.size(), 3u);
      ASSERT_TRUE(spec.AppendTokens("bad", {1}).ok());
    }
    d = spec.Speculate("bad", three, p);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(spec.AppendTokens("bad", {103, 104, 105, 106}).ok());
    d = spec.Speculate("bad", four, p);
    ASSERT_TRUE(d.ok());
    if (min_acceptance > 0.0f) {
      EXPECT_EQ(d->token_ids, (Str{104, 105, 106, 107})) << "must keep to the budget (4)";
    } else {
      EXPECT_EQ(d->token_ids, extended) << "no acceptance rule: extends";
    }
  }
}

// The supported extension reads only the request's own (local) tree: text
// that several other responses share does not extend a global draft.
TEST(SuffixSpeculatorTest, SupportedExtensionOnlyFromTheLocalTree) {
  const Str block = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  Str thrice;
  for (int c = 0; c < 3; ++c) thrice.insert(thrice.end(), block.begin(), block.end());
  DraftParams p;
  p.max_spec_tokens = 6;
  p.confident_min_support = 3;
  SuffixSpeculator spec({.max_depth = 64, .max_cached_requests = -1});
  // Local: the prompt holds the block three times.
  ASSERT_TRUE(spec.StartRequest("local", thrice).ok());
  absl::StatusOr<Draft> d = spec.Speculate("local", Str{0, 1, 2}, p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->token_ids, (Str{3, 4, 5, 6, 7, 8}));
  ASSERT_TRUE(spec.AppendTokens("local", thrice).ok());  // cached: the block 3 more times
  ASSERT_TRUE(spec.StopRequest("local").ok());
  // Global: the same path from the cached response keeps to the budget.
  ASSERT_TRUE(spec.StartRequest("other", {50, 51}).ok());
  d = spec.Speculate("other", Str{0, 1, 2}, p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->token_ids, (Str{3, 4}));
}

}  // namespace
}  // namespace floe::suffix_cache
