// A fork-join pool for the CPU kernels: the caller plus num_threads-1 workers
// run the tasks of one ParallelFor, handed out by an atomic counter (faster
// threads take more). Workers spin briefly after each op, because decode runs
// ~10 ops per layer back to back and a futex wake per op would dominate, then
// sleep on a futex so an idle engine costs nothing.
//
// Contract: one thread at a time calls ParallelFor (the backend's engine
// thread); calls do not nest. There is no global pool: the owner (the
// backend) decides how many threads it uses.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace floe::cpu {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Below this much work (in multiply-adds or element ops, roughly) a job runs
  // inline: a fork-join costs microseconds, and far more when the machine is
  // oversubscribed and a worker has to be rescheduled first.
  static constexpr int64_t kMinParallelWork = int64_t{1} << 18;

  // ParallelFor, or an inline loop when `work` < kMinParallelWork.
  template <class Fn>
  void ParallelFor(int64_t num_tasks, int64_t work, const Fn& fn) {
    if (work < kMinParallelWork) {
      for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    } else {
      ParallelFor(num_tasks, fn);
    }
  }

  // Calls fn(task, thread) for every task in [0, num_tasks), thread in
  // [0, num_threads()); returns when all are done.
  template <class Fn>
  void ParallelFor(int64_t num_tasks, const Fn& fn) {
    if (num_tasks <= 0) return;
    if (num_tasks == 1 || num_threads_ == 1) {
      for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
      return;
    }
    Run(num_tasks, [](const void* ctx, int64_t task, int thread) {
      (*static_cast<const Fn*>(ctx))(task, thread);
    }, &fn);
  }

 private:
  using TaskFn = void (*)(const void* ctx, int64_t task, int thread);
  void Run(int64_t num_tasks, TaskFn fn, const void* ctx);
  void RunTasks(int thread);
  void WorkerLoop(int thread);

  const int num_threads_;
  std::vector<std::thread> workers_;
  // The job being run; written by the caller before generation_ is bumped.
  TaskFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t num_tasks_ = 0;
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};   // workers still in the current job
  alignas(64) std::atomic<int> sleeping_{0};  // workers blocked in wait()
  std::atomic<bool> stop_{false};
};

}  // namespace floe::cpu
