// WorkerPool: a fixed set of threads for splitting one call's independent
// work items (the entries of a Step) over cores. The calling thread works too,
// so a call always progresses even when every pool thread is busy with other
// calls' items.
//
// Thread-safety: ParallelFor may be called from many threads at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace floe::suffix_cache {

class WorkerPool {
 public:
  // threads <= 0: no pool, ParallelFor runs inline.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn(i) for every i in [0, n); returns when all have finished.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

 private:
  struct Job {
    const std::function<void(size_t)>* fn;
    size_t n;
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
  };
  void RunItems(Job& job);
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace floe::suffix_cache
