// The store's eviction policies: FIFO drops the oldest ended response; usage
// (StoreOptions::eviction = kUsage) gives a response whose global drafts were
// accepted a second chance, both at the count bound (StartRequest) and at the
// byte budget (TrimToBudget).
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/suffix_cache/suffix_cache_store.h"
#include "tests/services/suffix_cache/service/step_item.h"

namespace floe::suffix_cache {
namespace {

constexpr char kNs[] = "default";

std::vector<int32_t> Tokens(int32_t first, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

StepItem Item(const std::string& id, int64_t offset, absl::Span<const int32_t> appended, bool speculate) {
  return MakeStepItem(kNs, id, offset, appended, speculate);
}

// Caches `tokens` as the ended response of `id`.
void Respond(SuffixCacheStore& store, const std::string& id, const std::vector<int32_t>& tokens) {
  ASSERT_TRUE(store.StartRequest(kNs, id, {}).ok());
  ASSERT_TRUE(store.Step({Item(id, 0, tokens, false)})[0].status.ok());
  ASSERT_TRUE(store.EndRequest(kNs, id).ok());
}

std::set<std::string> CachedIds(const SuffixCacheStore& store) {
  std::set<std::string> ids;
  for (const auto& ns : store.ExportSnapshot().namespaces) {
    for (const auto& r : ns.responses) ids.insert(r.request_id);
  }
  return ids;
}

class StoreEvictionTest : public ::testing::TestWithParam<EvictionKind> {
 protected:
  // Caches responses "a" then "b" (distinct tokens), then runs request "c"
  // whose prompt is a's first 8 tokens: its draft can only come from a in
  // the global tree, and c then emits a's next 4 tokens (accepted). c stays
  // active, so only a and b are candidates for eviction.
  void UseA(SuffixCacheStore& store) {
    Respond(store, "a", a_);
    Respond(store, "b", Tokens(2000, 40));
    const std::vector<int32_t> prompt(a_.begin(), a_.begin() + 8);
    ASSERT_TRUE(store.StartRequest(kNs, "c", prompt).ok());
    const StepOutcome first = store.Step({Item("c", 0, {}, true)})[0];
    ASSERT_TRUE(first.status.ok());
    ASSERT_GE(first.draft.token_ids.size(), 4u);
    ASSERT_EQ(first.draft.token_ids[0], a_[8]) << "the draft must be read from a";
    const std::vector<int32_t> emitted(a_.begin() + 8, a_.begin() + 12);
    ASSERT_TRUE(store.Step({Item("c", 0, emitted, false)})[0].status.ok());
  }
  std::string Survivor() const { return GetParam() == EvictionKind::kUsage ? "a" : "b"; }

  const std::vector<int32_t> a_ = Tokens(1000, 40);
};

TEST_P(StoreEvictionTest, CountBoundKeepsTheResponseWhoseDraftsWereAccepted) {
  StoreOptions options;
  options.max_cached_responses = 3;  // a, b, c; starting d evicts one
  options.eviction = GetParam();
  SuffixCacheStore store(options);
  UseA(store);
  ASSERT_TRUE(store.StartRequest(kNs, "d", {}).ok());
  EXPECT_EQ(CachedIds(store), std::set<std::string>{Survivor()});
  EXPECT_EQ(store.Stats().evictions_total, 1);
}

TEST_P(StoreEvictionTest, ByteBudgetKeepsTheResponseWhoseDraftsWereAccepted) {
  StoreOptions options;
  options.eviction = GetParam();
  SuffixCacheStore store(options);
  UseA(store);
  ASSERT_EQ(store.TrimToBudget(), 0);
  // The budget counts the global tree and the active request "c" together.
  const int64_t bytes = store.Stats().bytes + store.Stats().active_bytes;
  // One byte over: exactly one ended response goes.
  options.max_bytes = bytes - 1;
  SuffixCacheStore tight(options);
  UseA(tight);
  EXPECT_EQ(tight.TrimToBudget(), 1);
  EXPECT_EQ(CachedIds(tight), std::set<std::string>{Survivor()});
}

// The second chance is spent: the next eviction takes the credited response
// like any other when it is the oldest again.
TEST(StoreEvictionUsageTest, CreditIsSpentBySecondChance) {
  StoreOptions options;
  options.eviction = EvictionKind::kUsage;
  options.max_cached_responses = 3;
  SuffixCacheStore store(options);
  const std::vector<int32_t> a = Tokens(1000, 40);
  Respond(store, "a", a);
  ASSERT_TRUE(store.StartRequest(kNs, "c", std::vector<int32_t>(a.begin(), a.begin() + 8)).ok());
  ASSERT_FALSE(store.Step({Item("c", 0, {}, true)})[0].draft.token_ids.empty());
  ASSERT_TRUE(store.Step({Item("c", 0, std::vector<int32_t>(a.begin() + 8, a.begin() + 12), false)})[0].status.ok());
  ASSERT_TRUE(store.EndRequest(kNs, "c").ok());
  Respond(store, "b", Tokens(2000, 40));  // a, c, b: full
  Respond(store, "d", Tokens(3000, 40));  // a moves behind b; c (oldest now) goes
  EXPECT_EQ(CachedIds(store), (std::set<std::string>{"a", "b", "d"}));
  Respond(store, "e", Tokens(4000, 40));  // b is oldest (a was moved behind it)
  EXPECT_EQ(CachedIds(store), (std::set<std::string>{"a", "d", "e"}));
  Respond(store, "f", Tokens(5000, 40));  // d (started before a moved) goes
  EXPECT_EQ(CachedIds(store), (std::set<std::string>{"a", "e", "f"}));
  Respond(store, "g", Tokens(6000, 40));  // a's credit is spent: it goes
  EXPECT_EQ(CachedIds(store), (std::set<std::string>{"e", "f", "g"}));
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoreEvictionTest, ::testing::Values(EvictionKind::kFifo, EvictionKind::kUsage),
                         [](const auto& info) { return std::string(EvictionKindName(info.param)); });

// The local tree indexes only the prompt's tail: a prompt of any length
// costs at most max_prompt_index_tokens, and drafts from the tail remain.
TEST(StorePromptIndexTest, OnlyThePromptsTailIsIndexed) {
  auto first_draft = [](int64_t cap, const std::vector<int32_t>& prompt) {
    StoreOptions options;
    options.max_prompt_index_tokens = cap;
    SuffixCacheStore store(options);
    EXPECT_TRUE(store.StartRequest(kNs, "r", prompt).ok());
    const StepOutcome out = store.Step({Item("r", 0, {}, true)})[0];
    EXPECT_TRUE(out.status.ok());
    return out.draft.token_ids.empty() ? -1 : out.draft.token_ids[0];
  };
  // The prompt ends with its own first 4 tokens: only the head continues them.
  std::vector<int32_t> head_repeat = Tokens(1000, 40);
  for (int32_t t : Tokens(5000, 16)) head_repeat.push_back(t);
  for (int32_t t : Tokens(1000, 4)) head_repeat.push_back(t);
  EXPECT_EQ(first_draft(65536, head_repeat), 1004) << "uncapped, the head is indexed";
  EXPECT_EQ(first_draft(20, head_repeat), -1) << "capped, the head is not";
  // A repeat inside the tail still drafts under the cap.
  std::vector<int32_t> tail_repeat = Tokens(1000, 40);
  for (int32_t t : Tokens(5000, 8)) tail_repeat.push_back(t);
  for (int32_t t : Tokens(5000, 4)) tail_repeat.push_back(t);
  EXPECT_EQ(first_draft(20, tail_repeat), 5004);
}

}  // namespace
}  // namespace floe::suffix_cache
