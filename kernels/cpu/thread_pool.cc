#include "kernels/cpu/thread_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FLOE_CPU_RELAX() _mm_pause()
#else
#define FLOE_CPU_RELAX() std::this_thread::yield()
#endif

namespace floe::cpu {
namespace {
// ~50-100 us of polling: longer than the gap between two ops of a forward
// pass, far shorter than the engine's work between two steps.
constexpr int kSpinIterations = 20000;

// Raw futex on the generation word: libstdc++ 12's atomic::wait/notify can
// lose wakeups (it skips the wake when its own waiter count looks zero).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  FutexWakeAll(&generation_);
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::RunTasks(int thread) {
  for (;;) {
    int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    fn_(ctx_, task, thread);
  }
}

void ThreadPool::Run(int64_t num_tasks, TaskFn fn, const void* ctx) {
  fn_ = fn;
  ctx_ = ctx;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job, ordered before the load below
  if (sleeping_.load() > 0) FutexWakeAll(&generation_);
  RunTasks(0);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < kSpinIterations) {
      FLOE_CPU_RELAX();
    } else {
      std::this_thread::yield();  // a worker was descheduled (noisy VM)
    }
  }
}

void ThreadPool::WorkerLoop(int thread) {
  // Generation 0 is the constructor's: a job published before this thread
  // first runs must still be seen as new.
  uint32_t seen = 0;
  for (;;) {
    uint32_t current = generation_.load(std::memory_order_acquire);
    for (int spin = 0; current == seen && spin < kSpinIterations; ++spin) {
      FLOE_CPU_RELAX();
      current = generation_.load(std::memory_order_acquire);
    }
    if (current == seen) {
      sleeping_.fetch_add(1);  // seq_cst: pairs with Run's bump-then-check
      FutexWait(&generation_, seen);
      sleeping_.fetch_sub(1);
      current = generation_.load(std::memory_order_acquire);
      if (current == seen) continue;
    }
    seen = current;
    if (stop_.load()) return;
    RunTasks(thread);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace floe::cpu
