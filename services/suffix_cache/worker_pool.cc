#include "services/suffix_cache/worker_pool.h"

namespace floe::suffix_cache {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  for (auto& t : threads_) t.join();
}

void WorkerPool::RunItems(Job& job) {
  for (size_t i; (i = job.next.fetch_add(1)) < job.n;) {
    (*job.fn)(i);
    if (job.done.fetch_add(1) + 1 == job.n) {
      absl::MutexLock l(&mu_);  // the release wakes the waiting caller
    }
  }
}

void WorkerPool::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) ABSL_NO_THREAD_SAFETY_ANALYSIS { return p->stop_ || !p->jobs_.empty(); }, this));
      if (stop_) return;
      job = jobs_.front();
      if (job->next.load() >= job->n) {  // all items claimed: retire it
        jobs_.pop_front();
        continue;
      }
    }
    RunItems(*job);
  }
}

void WorkerPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (threads_.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  {
    absl::MutexLock l(&mu_);
    jobs_.push_back(job);
  }
  RunItems(*job);
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(+[](Job* j) { return j->done.load() == j->n; }, job.get()));
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (*it == job) {
      jobs_.erase(it);
      break;
    }
  }
}

}  // namespace floe::suffix_cache
