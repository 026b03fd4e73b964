#include "services/suffix_cache/worker_pool.h"

namespace floe::suffix_cache {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::RunItems(Job& job) {
  for (size_t i; (i = job.next.fetch_add(1)) < job.n;) {
    (*job.fn)(i);
    if (job.done.fetch_add(1) + 1 == job.n) {
      // Under mu_: the waiting caller either sees done == n or is woken.
      std::lock_guard<std::mutex> l(mu_);
      done_cv_.notify_all();
    }
  }
}

void WorkerPool::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> l(mu_);
      work_cv_.wait(l, [this] { return stop_ || !jobs_.empty(); });
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
    std::lock_guard<std::mutex> l(mu_);
    jobs_.push_back(job);
  }
  work_cv_.notify_all();
  RunItems(*job);
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait(l, [&] { return job->done.load() == job->n; });
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (*it == job) {
      jobs_.erase(it);
      break;
    }
  }
}

}  // namespace floe::suffix_cache
