// WorkerPool: a fixed set of threads for splitting one call's independent
// work items (the entries of a Step) over cores. The calling thread works too,
// so a call always progresses even when every pool thread is busy with other
// calls' items.
//
// Thread-safety: ParallelFor may be called from many threads at once.
// std::mutex, not absl::Mutex: TSan sees pthread locks (scripts/tsan.sh), and
// Debian's libabsl is neither TSan-built nor free of debug deadlock checks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

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

  std::mutex mu_;
  std::condition_variable work_cv_;  // jobs_ gained a job, or stop_
  std::condition_variable done_cv_;  // some job's last item finished
  std::deque<std::shared_ptr<Job>> jobs_;  // guarded by mu_
  bool stop_ = false;                      // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace floe::suffix_cache
