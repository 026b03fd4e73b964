// Many threads on one SuffixCacheStore at once: Steps (local + global
// appends, speculates) from several "workers", request starts/ends/aborts,
// count and byte eviction (FIFO and usage-aware), starts refused over the
// byte budget, lease expiry (a short lease: requests expire under running
// Steps), snapshots, stats and namespace
// clears, in both global-append modes and with a step pool. Checks the store
// stays consistent (every count adds up, the active requests' bytes return to
// zero, a snapshot restores to the same cache, drafts only hold tokens of
// their own namespace). scripts/tsan.sh runs it
// under ThreadSanitizer, which fails the run on any data race.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/suffix_cache_store.h"

namespace floe::suffix_cache {
namespace {

struct Mode {
  bool async_appends;
  int step_threads;
  EvictionKind eviction = EvictionKind::kFifo;
};

class StoreStressTest : public ::testing::TestWithParam<Mode> {};
INSTANTIATE_TEST_SUITE_P(Modes, StoreStressTest,
                         ::testing::Values(Mode{false, 0}, Mode{false, 2}, Mode{true, 2},
                                           Mode{false, 2, EvictionKind::kUsage}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.async_appends ? "Async" : "Sync", "Pool",
                                               info.param.step_threads,
                                               info.param.eviction == EvictionKind::kUsage ? "Usage" : "");
                         });

// Token ids carry their namespace: namespace k only ever uses ids in
// [1000 k, 1000 k + 1000), so a draft token from elsewhere is visible.
int32_t TokenOf(int ns, int i) { return 1000 * ns + (i * 7) % 50; }

TEST_P(StoreStressTest, ConcurrentStepsLifecycleEvictionSnapshots) {
  StoreOptions so;
  so.max_depth = 16;
  so.max_cached_responses = 12;
  so.max_bytes = 64 << 10;  // small: TrimToBudget evicts while Steps run
  // A lease of 20 clock reads (each read moves the clock 100 us; Steps,
  // starts and sweeps read it): some requests expire mid-flight, whatever
  // the machine's speed.
  std::atomic<int64_t> reads{0};
  so.request_lease = std::chrono::milliseconds(2);
  so.clock = [&reads] {
    return std::chrono::steady_clock::time_point(std::chrono::microseconds(100 * reads.fetch_add(1)));
  };
  so.async_global_appends = GetParam().async_appends;
  so.step_threads = GetParam().step_threads;
  so.eviction = GetParam().eviction;
  SuffixCacheStore store(so);
  constexpr int kWorkers = 4, kNamespaces = 2, kRounds = 40, kBatch = 3, kSteps = 6;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const int nsi = w % kNamespaces;
      const std::string ns = absl::StrCat("ns", nsi);
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::string> ids;
        for (int b = 0; b < kBatch; ++b) {
          ids.push_back(absl::StrCat("w", w, "-r", round, "-b", b));
          std::vector<int32_t> prompt;
          for (int i = 0; i < 20; ++i) prompt.push_back(TokenOf(nsi, i + b));
          // The small budget refuses some starts (active requests count in
          // it); their Steps then answer NOT_FOUND.
          const absl::Status st = store.StartRequest(ns, ids.back(), prompt);
          failures += !st.ok() && !absl::IsResourceExhausted(st);
        }
        std::vector<int32_t> tokens;
        for (int i = 0; i < 4 * kSteps; ++i) tokens.push_back(TokenOf(nsi, i + round));
        for (int step = 0; step < kSteps; ++step) {
          std::vector<StepItem> items;
          for (const std::string& id : ids) {
            DraftParams p;
            p.max_spec_tokens = 8;
            p.use_tree_spec = (step % 2) == 1;
            items.push_back(StepItem{ns, id, 4 * step, absl::MakeConstSpan(tokens).subspan(4 * step, 4), true, p});
          }
          for (const StepOutcome& o : store.Step(items)) {
            // A namespace clear may end the requests under us.
            if (!o.status.ok() && o.status.code() != absl::StatusCode::kNotFound &&
                o.status.code() != absl::StatusCode::kFailedPrecondition) {
              ++failures;
            }
            for (int32_t t : o.draft.token_ids) failures += t / 1000 != nsi;
          }
        }
        for (size_t b = 0; b < ids.size(); ++b) {
          if ((round + b) % 4 == 0) {
            store.AbortRequest(ns, ids[b]).IgnoreError();  // NotFound after a clear
          } else {
            store.EndRequest(ns, ids[b]).IgnoreError();
          }
        }
      }
    });
  }
  // The maintenance thread's work, and admin calls, meanwhile.
  threads.emplace_back([&] {
    int i = 0;
    while (!stop.load()) {
      store.TrimToBudget();
      store.ExpireIdle();
      SnapshotData snap = store.ExportSnapshot();
      for (const auto& n : snap.namespaces) failures += n.responses.size() > 12;
      StoreStats stats = store.Stats();
      failures += stats.active < 0 || stats.cached < 0;
      if (++i % 20 == 0) store.ClearNamespace("ns1");
      std::this_thread::yield();
    }
  });
  for (int w = 0; w < kWorkers; ++w) threads[w].join();
  stop.store(true);
  threads.back().join();
  EXPECT_EQ(failures.load(), 0);
  // Steps on a namespace cleared under them queued appends that only the
  // applier releases.
  store.WaitForAppends();

  StoreStats stats = store.Stats();
  EXPECT_EQ(stats.active, 0);
  EXPECT_EQ(stats.active_bytes, 0);
  RecordProperty("expired", static_cast<int>(stats.expired_total));
  RecordProperty("refused_starts", static_cast<int>(stats.refused_starts_total));
  EXPECT_TRUE(store.CheckIntegrity().ok()) << store.CheckIntegrity();
  int64_t tokens = 0;
  SnapshotData snap = store.ExportSnapshot();
  for (const auto& n : snap.namespaces) {
    EXPECT_LE(static_cast<int64_t>(n.responses.size()), so.max_cached_responses);
    for (const auto& r : n.responses) tokens += static_cast<int64_t>(r.tokens.size());
  }
  EXPECT_EQ(tokens, stats.cached_tokens);
  // The snapshot restores to the same cache.
  SuffixCacheStore restored(so);
  restored.ImportSnapshot(snap);
  StoreStats again = restored.Stats();
  EXPECT_EQ(again.cached, stats.cached);
  EXPECT_EQ(again.cached_tokens, stats.cached_tokens);
}

}  // namespace
}  // namespace floe::suffix_cache
