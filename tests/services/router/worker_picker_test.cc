// Session affinity's spread: for 2 to 16 workers, sequential ids
// ("sess-0", "sess-1", ...) and random ones land within 10% of an even
// share on every worker (the probe of issue 17 saw 76% / 24% on 2, and
// sess-0 .. sess-39 all on one). A session keeps its worker; losing a
// worker moves only its own sessions. With every untried worker ejected,
// both policies still route (panic routing) until every worker has failed
// the request.
#include "services/router/worker_picker.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/router/worker_pool.h"

namespace floe {
namespace {

std::unique_ptr<WorkerPool> Pool(int workers) {
  std::vector<std::string> addresses;
  for (int i = 0; i < workers; ++i) addresses.push_back(absl::StrCat("10.0.0.", i + 1, ":50051"));
  auto pool = std::make_unique<WorkerPool>(addresses, WorkerPoolOptions{});
  for (const auto& w : pool->workers()) w->healthy = true;  // no poller: the test decides health
  return pool;
}

TEST(SessionAffinityTest, SpreadsWithinTenPercentOfEven) {
  constexpr int kSessions = 100000;
  std::mt19937_64 rng(7);
  double worst = 0;
  for (int workers = 2; workers <= 16; ++workers) {
    auto pool = Pool(workers);
    auto picker = MakeSessionAffinityPicker(pool.get(), 1 << 30);
    for (bool sequential : {true, false}) {
      std::map<WorkerState*, int> hits;
      for (int i = 0; i < kSessions; ++i) {
        const std::string id = sequential ? absl::StrCat("sess-", i) : absl::StrFormat("%016x", rng());
        ++hits[picker->Pick({id, {}})];
      }
      ASSERT_EQ(static_cast<int>(hits.size()), workers);
      const double even = static_cast<double>(kSessions) / workers;
      for (const auto& [worker, n] : hits) {
        worst = std::max(worst, std::abs(n / even - 1.0));
        EXPECT_NEAR(n / even, 1.0, 0.10) << workers << " workers, " << (sequential ? "sequential" : "random")
                                         << " ids: " << worker->address << " got " << n;
      }
    }
  }
  std::printf("worst share off even, 2-16 workers, sequential and random ids: %.1f%%\n", 100 * worst);
  // The probe's case: sess-0 .. sess-39 on two workers use both.
  auto pool = Pool(2);
  auto picker = MakeSessionAffinityPicker(pool.get(), 1 << 30);
  std::map<WorkerState*, int> hits;
  for (int i = 0; i < 40; ++i) ++hits[picker->Pick({absl::StrCat("sess-", i), {}})];
  EXPECT_EQ(hits.size(), 2u);
}

TEST(SessionAffinityTest, StableAndMovesOnlyTheLostWorkersSessions) {
  auto pool = Pool(4);
  auto picker = MakeSessionAffinityPicker(pool.get(), 1 << 30);
  std::vector<WorkerState*> before;
  for (int i = 0; i < 2000; ++i) before.push_back(picker->Pick({absl::StrCat("s", i), {}}));
  for (int i = 0; i < 2000; ++i) EXPECT_EQ(picker->Pick({absl::StrCat("s", i), {}}), before[i]);
  WorkerState* lost = pool->workers()[1].get();
  lost->healthy = false;
  for (int i = 0; i < 2000; ++i) {
    WorkerState* now = picker->Pick({absl::StrCat("s", i), {}});
    ASSERT_NE(now, lost);
    if (before[i] != lost) EXPECT_EQ(now, before[i]) << "session s" << i << " moved off a healthy worker";
  }
}

TEST(PanicRoutingTest, EjectedWorkersServeWhenNoneIsHealthy) {
  auto pool = Pool(2);
  WorkerState* a = pool->workers()[0].get();
  WorkerState* b = pool->workers()[1].get();
  for (auto& picker : {MakeLeastOutstandingPicker(pool.get()), MakeSessionAffinityPicker(pool.get(), 1 << 30)}) {
    a->healthy = false;
    b->healthy = true;
    // One worker healthy: the ejected one gets nothing, session or not.
    for (int i = 0; i < 200; ++i) EXPECT_EQ(picker->Pick({absl::StrCat("s", i), {}}), b);
    EXPECT_EQ(picker->Pick({"", {}}), b);
    EXPECT_EQ(a->panic_picks.load() + b->panic_picks.load(), 0);
    // None healthy: the least loaded untried worker, then the other, then none.
    b->healthy = false;
    a->outstanding = 3;
    b->outstanding = 1;
    EXPECT_EQ(picker->Pick({"s1", {}}), b);
    EXPECT_EQ(picker->Pick({"", {}}), b);
    EXPECT_EQ(picker->Pick({"s1", {b}}), a);
    EXPECT_EQ(picker->Pick({"s1", {a, b}}), nullptr);
    // A healthy worker that already failed this request: the ejected one is tried.
    b->healthy = true;
    EXPECT_EQ(picker->Pick({"s1", {b}}), a);
    // Every pick of an ejected worker is counted (floe_router_worker_panic_picks_total).
    EXPECT_EQ(a->panic_picks.load(), 2);
    EXPECT_EQ(b->panic_picks.load(), 2);
    a->outstanding = 0;
    b->outstanding = 0;
    a->panic_picks = 0;
    b->panic_picks = 0;
  }
}

}  // namespace
}  // namespace floe
