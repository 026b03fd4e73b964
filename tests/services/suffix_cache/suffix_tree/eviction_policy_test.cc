#include "services/suffix_cache/suffix_tree/eviction_policy.h"

#include <deque>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

TEST(EvictionPolicyTest, ParsesNames) {
  EXPECT_EQ(*ParseEvictionKind("fifo"), EvictionKind::kFifo);
  EXPECT_EQ(*ParseEvictionKind("usage"), EvictionKind::kUsage);
  EXPECT_EQ(ParseEvictionKind("lru").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(EvictionKindName(EvictionKind::kUsage), "usage");
}

TEST(EvictionPolicyTest, FifoIgnoresCreditAndNeverPicksProtected) {
  EvictionPolicy p(EvictionKind::kFifo);
  for (int id : {5, 6, 7}) p.Add(id);
  p.Credit(5, 10);
  EXPECT_EQ(p.credit(5), 0);
  EXPECT_EQ(p.PickVictim(/*protect=*/5), 6);  // the protected oldest is skipped
  EXPECT_EQ(p.PickVictim(), 5);                // and stays at the front
  EXPECT_EQ(p.PickVictim(7), -1);              // only the protected one is left
  EXPECT_EQ(p.size(), 1u);
  EXPECT_EQ(p.PickVictim(), 7);
  EXPECT_EQ(p.PickVictim(), -1);
}

TEST(EvictionPolicyTest, UsageGivesCreditedResponsesASecondChance) {
  EvictionPolicy p(EvictionKind::kUsage);
  for (int id : {1, 2, 3, 4}) p.Add(id);
  p.Credit(1, 3);
  p.Credit(3, 1);
  p.Credit(99, 5);  // unknown: ignored
  EXPECT_FALSE(p.Contains(99));
  // 1 is skipped (credit spent, moved behind 4), 2 goes.
  EXPECT_EQ(p.PickVictim(), 2);
  EXPECT_EQ(p.credit(1), 0);
  // 3 is skipped the same way; 4 goes; then 1 and 3 in their new order.
  EXPECT_EQ(p.PickVictim(), 4);
  EXPECT_EQ(p.PickVictim(), 1);
  EXPECT_EQ(p.PickVictim(), 3);
  EXPECT_EQ(p.PickVictim(), -1);
}

TEST(EvictionPolicyTest, UsageEvictsEvenWhenEveryoneHasCredit) {
  EvictionPolicy p(EvictionKind::kUsage);
  for (int id : {1, 2, 3}) {
    p.Add(id);
    p.Credit(id, 1);
  }
  EXPECT_EQ(p.PickVictim(3), 1);  // one round spends the credits, then FIFO
  EXPECT_EQ(p.size(), 2u);
}

TEST(EvictionPolicyTest, RemoveAndReAdd) {
  EvictionPolicy p(EvictionKind::kUsage);
  for (int id : {1, 2, 3}) p.Add(id);
  p.Credit(2, 4);
  p.Remove(1);
  p.Remove(42);  // unknown: ignored
  p.Add(2);      // re-added: newest, credit reset
  EXPECT_EQ(p.credit(2), 0);
  EXPECT_EQ(p.PickVictim(), 3);
  EXPECT_EQ(p.PickVictim(), 2);
  EXPECT_EQ(p.size(), 0u);
}

// Oracle: a plain list model of both policies under random operations.
TEST(EvictionPolicyTest, MatchesListModelUnderRandomOperations) {
  for (EvictionKind kind : {EvictionKind::kFifo, EvictionKind::kUsage}) {
    EvictionPolicy p(kind);
    struct E {
      int id;
      int64_t credit;
    };
    std::deque<E> model;
    std::mt19937 rng(7);
    int next_id = 0;
    for (int op = 0; op < 20000; ++op) {
      const int r = static_cast<int>(rng() % 10);
      if (r < 4 || model.empty()) {
        p.Add(next_id);
        model.push_back({next_id++, 0});
      } else if (r < 6) {
        const int id = model[rng() % model.size()].id;
        p.Remove(id);
        for (auto it = model.begin(); it != model.end(); ++it) {
          if (it->id == id) {
            model.erase(it);
            break;
          }
        }
      } else if (r < 8) {
        const int id = model[rng() % model.size()].id;
        const int64_t a = rng() % 3;
        p.Credit(id, a);
        if (kind == EvictionKind::kUsage) {
          for (E& e : model) {
            if (e.id == id) e.credit += a;
          }
        }
      } else {
        const int protect = rng() % 2 ? model.back().id : -1;
        int expect = -1;
        std::deque<E> kept;
        while (!model.empty()) {
          E e = model.front();
          model.pop_front();
          if (e.id == protect) {
            kept.push_back(e);
          } else if (e.credit > 0) {
            model.push_back({e.id, 0});
          } else {
            expect = e.id;
            break;
          }
        }
        for (auto it = kept.rbegin(); it != kept.rend(); ++it) model.push_front(*it);
        ASSERT_EQ(p.PickVictim(protect), expect) << "op " << op;
      }
      ASSERT_EQ(p.size(), model.size());
    }
  }
}

}  // namespace
}  // namespace floe::suffix_cache
