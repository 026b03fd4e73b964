#include "services/suffix_cache/worker_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

TEST(WorkerPoolTest, RunsEveryItemOnceFromManyCallers) {
  for (int threads : {0, 1, 3}) {
    WorkerPool pool(threads);
    std::vector<std::thread> callers;
    std::atomic<int> failures{0};
    for (int c = 0; c < 4; ++c) {
      callers.emplace_back([&] {
        for (int round = 0; round < 50; ++round) {
          const size_t n = 1 + round % 17;
          std::vector<std::atomic<int>> hits(n);
          pool.ParallelFor(n, [&](size_t i) { hits[i].fetch_add(1); });
          for (auto& h : hits) failures += h.load() != 1;
        }
      });
    }
    for (auto& t : callers) t.join();
    EXPECT_EQ(failures.load(), 0) << threads;
  }
}

}  // namespace
}  // namespace floe::suffix_cache
