// The store's memory bound and leases: active requests count in max_bytes
// (a StartRequest beyond it is refused, the requests running are still
// served, the bytes return to the baseline once they end), only a prompt's
// tail is indexed, and a request no call names for request_lease expires
// (ended, its memory released; a Step naming it then answers NOT_FOUND).
// Leases run on an injected clock: no sleeps, no timing.
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/suffix_cache_store.h"
#include "tests/services/suffix_cache/service/step_item.h"

namespace floe::suffix_cache {
namespace {

constexpr char kNs[] = "default";
using std::chrono::milliseconds;

// Distinct ids from `first` (no repeats: a worst case for the tree's size).
std::vector<int32_t> Tokens(int32_t first, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

StepItem Item(const std::string& id, int64_t offset, absl::Span<const int32_t> appended, bool speculate) {
  return MakeStepItem(kNs, id, offset, appended, speculate);
}

// A clock the test moves by hand.
struct FakeClock {
  std::atomic<int64_t> ms{1000000};
  void Advance(milliseconds d) { ms.fetch_add(d.count()); }
  std::function<std::chrono::steady_clock::time_point()> Fn() {
    return [this] { return std::chrono::steady_clock::time_point(milliseconds(ms.load())); };
  }
};

TEST(StoreMemoryTest, ActiveRequestsCountInTheBudgetAndStartsBeyondAreRefused) {
  StoreOptions options;
  options.max_bytes = 1 << 20;
  SuffixCacheStore store(options);
  ASSERT_EQ(store.Stats().active_bytes, 0);
  // 2,000-token prompts hold ~150-300 KB each: the budget takes a few.
  std::vector<std::string> admitted;
  absl::Status refused;
  for (int i = 0; i < 20 && refused.ok(); ++i) {
    const std::string id = absl::StrCat("r", i);
    refused = store.StartRequest(kNs, id, Tokens(100000 * (i + 1), 2000));
    if (refused.ok()) admitted.push_back(id);
  }
  ASSERT_GE(admitted.size(), 2u);
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("active requests hold"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("of --max-bytes 1048576"), std::string::npos) << refused;
  const StoreStats full = store.Stats();
  EXPECT_EQ(full.active, static_cast<int64_t>(admitted.size()));
  EXPECT_GT(full.active_bytes, 0);
  EXPECT_LE(full.active_bytes, options.max_bytes);
  EXPECT_EQ(full.refused_starts_total, 1);
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();

  // The requests already running are still served (and their growth counted).
  const std::vector<int32_t> copy = Tokens(100000 + 10, 4);  // r0 repeats part of its prompt
  StepOutcome out = store.Step({Item(admitted[0], 0, copy, true)})[0];
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_FALSE(out.draft.token_ids.empty()) << "r0 copies its own prompt: a local draft";
  EXPECT_EQ(out.draft.token_ids[0], 100000 + 14);
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();

  // Ending (or aborting) them returns every byte; starts succeed again.
  for (size_t i = 0; i < admitted.size(); ++i) {
    if (i % 2 == 0) {
      ASSERT_TRUE(store.EndRequest(kNs, admitted[i]).ok());
    } else {
      ASSERT_TRUE(store.AbortRequest(kNs, admitted[i]).ok());
    }
  }
  EXPECT_EQ(store.Stats().active, 0);
  EXPECT_EQ(store.Stats().active_bytes, 0);
  EXPECT_TRUE(store.StartRequest(kNs, "again", Tokens(7, 2000)).ok());
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();
}

TEST(StoreMemoryTest, EndedResponsesAreEvictedToMakeRoomForActiveOnes) {
  StoreOptions options;
  SuffixCacheStore roomy(options);
  // Measure one request's bytes and one cached response's.
  ASSERT_TRUE(roomy.StartRequest(kNs, "old", {}).ok());
  const std::vector<int32_t> response = Tokens(5000, 2000);  // its tree outweighs "live"
  ASSERT_TRUE(roomy.Step({Item("old", 0, response, false)})[0].status.ok());
  ASSERT_TRUE(roomy.EndRequest(kNs, "old").ok());
  ASSERT_TRUE(roomy.StartRequest(kNs, "live", Tokens(1, 1000)).ok());
  const StoreStats measured = roomy.Stats();
  ASSERT_GT(measured.bytes, 0);
  ASSERT_GT(measured.active_bytes, 0);

  // A budget that holds the active request but not both.
  options.max_bytes = measured.active_bytes + measured.bytes - 1;
  SuffixCacheStore store(options);
  ASSERT_TRUE(store.StartRequest(kNs, "old", {}).ok());
  ASSERT_TRUE(store.Step({Item("old", 0, response, false)})[0].status.ok());
  ASSERT_TRUE(store.EndRequest(kNs, "old").ok());
  ASSERT_TRUE(store.StartRequest(kNs, "live", Tokens(1, 1000)).ok());
  EXPECT_EQ(store.TrimToBudget(), 1);  // the ended response goes, the active request stays
  const StoreStats after = store.Stats();
  EXPECT_EQ(after.active, 1);
  EXPECT_EQ(after.cached, 1);  // "live"'s own (empty) response
  EXPECT_EQ(after.budget_evictions_total, 1);
  EXPECT_LE(after.bytes + after.active_bytes, options.max_bytes);
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();
}

TEST(StoreMemoryTest, QueuedGlobalAppendsAreCountedUntilApplied) {
  StoreOptions options;
  options.async_global_appends = true;
  SuffixCacheStore store(options);
  ASSERT_TRUE(store.StartRequest(kNs, "a", Tokens(1, 50)).ok());
  ASSERT_TRUE(store.StartRequest(kNs, "b", Tokens(100, 50)).ok());
  const std::vector<int32_t> tokens = Tokens(500, 64);
  for (int step = 0; step < 16; ++step) {
    const auto part = absl::MakeConstSpan(tokens).subspan(4 * step, 4);
    for (const StepOutcome& o : store.Step({Item("a", 4 * step, part, true), Item("b", 4 * step, part, true)})) {
      ASSERT_TRUE(o.status.ok()) << o.status;
    }
  }
  // EndRequest flushes the queue: every byte is back.
  ASSERT_TRUE(store.EndRequest(kNs, "a").ok());
  ASSERT_TRUE(store.EndRequest(kNs, "b").ok());
  EXPECT_EQ(store.Stats().active_bytes, 0);
  EXPECT_EQ(store.Stats().cached_tokens, 128);
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();
}

// A cleared namespace's queued appends are released at once, as an ended
// request's are; appends a Step queues on it afterwards, by the applier.
TEST(StoreMemoryTest, ClearingANamespaceReleasesItsQueuedAppends) {
  StoreOptions options;
  options.async_global_appends = true;
  SuffixCacheStore store(options);
  ASSERT_TRUE(store.StartRequest(kNs, "a", Tokens(1, 50)).ok());
  const std::vector<int32_t> tokens = Tokens(500, 64);
  for (int step = 0; step < 16; ++step) {
    const auto part = absl::MakeConstSpan(tokens).subspan(4 * step, 4);
    for (const StepOutcome& o : store.Step({Item("a", 4 * step, part, true)})) ASSERT_TRUE(o.status.ok()) << o.status;
  }
  EXPECT_EQ(store.ClearNamespace(kNs), (std::pair<int64_t, int64_t>{0, 1}));
  EXPECT_EQ(store.Stats().active_bytes, 0);
  store.WaitForAppends();
  EXPECT_EQ(store.Stats().active_bytes, 0);
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();
}

// Any prompt length costs at most the cap; the admission estimate uses the
// indexed length, so a very long prompt is admitted under a budget its whole
// length would not fit.
TEST(StoreMemoryTest, APromptIsIndexedOnlyUpToTheCap) {
  StoreOptions options;
  options.max_prompt_index_tokens = 1000;
  options.max_bytes = 1 << 20;
  SuffixCacheStore store(options);
  ASSERT_TRUE(store.StartRequest(kNs, "short", Tokens(1, 1000)).ok());
  const int64_t short_bytes = store.Stats().active_bytes;
  ASSERT_TRUE(store.StartRequest(kNs, "long", Tokens(1000000, 900000)).ok());
  const int64_t long_bytes = store.Stats().active_bytes - short_bytes;
  EXPECT_NEAR(long_bytes, short_bytes, 16) << "both index 1,000 distinct tokens";
  // The tail drafts: "long" continues a span of its last 1,000 tokens.
  const std::vector<int32_t> tail = Tokens(1000000 + 900000 - 500, 4);
  StepOutcome out = store.Step({Item("long", 0, tail, true)})[0];
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_FALSE(out.draft.token_ids.empty());
  EXPECT_EQ(out.draft.token_ids[0], 1000000 + 900000 - 496);
  // The head does not (it was never indexed).
  ASSERT_TRUE(store.StartRequest(kNs, "head", Tokens(2000000, 900000)).ok());
  const std::vector<int32_t> head = Tokens(2000000 + 10, 4);
  out = store.Step({Item("head", 0, head, true)})[0];
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_TRUE(out.draft.token_ids.empty());
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();
}

TEST(StoreLeaseTest, AnIdleRequestExpiresOneThatKeepsSteppingDoesNot) {
  FakeClock clock;
  StoreOptions options;
  options.request_lease = milliseconds(200);
  options.clock = clock.Fn();
  SuffixCacheStore store(options);
  ASSERT_TRUE(store.StartRequest(kNs, "idle", Tokens(1, 100)).ok());
  ASSERT_TRUE(store.StartRequest(kNs, "busy", Tokens(1000, 100)).ok());
  const std::vector<int32_t> said = Tokens(1, 8);  // "idle" says something before it goes quiet
  ASSERT_TRUE(store.Step({Item("idle", 0, said, false)})[0].status.ok());
  const int64_t both = store.Stats().active_bytes;

  const std::vector<int32_t> tokens = Tokens(5000, 40);
  std::vector<SuffixCacheStore::Expired> expired;
  for (int step = 0; step < 10; ++step) {
    clock.Advance(milliseconds(150));  // under the lease between calls
    const auto part = absl::MakeConstSpan(tokens).subspan(4 * step, 4);
    ASSERT_TRUE(store.Step({Item("busy", 4 * step, part, true)})[0].status.ok()) << "step " << step;
    for (SuffixCacheStore::Expired& e : store.ExpireIdle()) expired.push_back(std::move(e));
  }
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].ns, kNs);
  EXPECT_EQ(expired[0].request_id, "idle");
  EXPECT_GT(expired[0].idle, milliseconds(200));
  EXPECT_GT(expired[0].bytes, 0);

  const StoreStats stats = store.Stats();
  EXPECT_EQ(stats.active, 1);
  EXPECT_EQ(stats.expired_total, 1);
  EXPECT_LT(stats.active_bytes, both);
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();

  // A Step naming it: NOT_FOUND, saying it expired (a worker stops asking).
  StepOutcome out = store.Step({Item("idle", 8, {}, true), Item("busy", 40, {}, true)})[0];
  EXPECT_EQ(out.status.code(), absl::StatusCode::kNotFound) << out.status;
  EXPECT_NE(out.status.message().find("request_id 'idle'"), std::string::npos) << out.status;
  EXPECT_NE(out.status.message().find("expired"), std::string::npos) << out.status;
  EXPECT_NE(out.status.message().find("--request-lease-s 0.2"), std::string::npos) << out.status;
  EXPECT_EQ(store.EndRequest(kNs, "idle").status().code(), absl::StatusCode::kNotFound);

  // Expired as if ended: what it had said stays cached and drafts for others.
  ASSERT_TRUE(store.StartRequest(kNs, "reader", Tokens(1, 4)).ok());
  out = store.Step({Item("reader", 0, {}, true)})[0];
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_FALSE(out.draft.token_ids.empty());
  EXPECT_EQ(out.draft.token_ids[0], 5);
  // The id can be started again.
  EXPECT_TRUE(store.StartRequest(kNs, "idle", Tokens(1, 10)).ok());
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();

  // Ending every request returns every byte.
  for (const char* id : {"busy", "reader", "idle"}) ASSERT_TRUE(store.EndRequest(kNs, id).ok()) << id;
  EXPECT_EQ(store.Stats().active_bytes, 0);
}

TEST(StoreLeaseTest, NoLeaseNeverExpires) {
  FakeClock clock;
  StoreOptions options;
  options.request_lease = milliseconds(0);
  options.clock = clock.Fn();
  SuffixCacheStore store(options);
  ASSERT_TRUE(store.StartRequest(kNs, "r", Tokens(1, 10)).ok());
  clock.Advance(std::chrono::hours(24 * 365));
  EXPECT_TRUE(store.ExpireIdle().empty());
  EXPECT_EQ(store.Stats().active, 1);
}

TEST(StoreLeaseTest, AnyStepEntryRenewsEvenARefusedOne) {
  FakeClock clock;
  StoreOptions options;
  options.request_lease = milliseconds(200);
  options.clock = clock.Fn();
  SuffixCacheStore store(options);
  ASSERT_TRUE(store.StartRequest(kNs, "r", Tokens(1, 10)).ok());
  for (int i = 0; i < 5; ++i) {
    clock.Advance(milliseconds(150));
    // Out of order (the worker resynchronises): still a call naming it.
    EXPECT_EQ(store.Step({Item("r", 99, {}, true)})[0].status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(store.ExpireIdle().empty());
  }
  clock.Advance(milliseconds(201));
  EXPECT_EQ(store.ExpireIdle().size(), 1u);
}

}  // namespace
}  // namespace floe::suffix_cache
