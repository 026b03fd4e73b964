// Bounds the router's load: at most `max_in_flight` requests are relayed at
// once, at most `max_queued` more wait (each no longer than `queue_timeout`),
// and anything beyond is refused at once with RESOURCE_EXHAUSTED, so overload
// costs a client a fast, retryable error rather than a hang.
//
// Waiting holds no thread: EnterAsync queues a callback that a Leave() (or the
// gate's one expiry thread, at the deadline) runs. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace floe {

class AdmissionGate {
 public:
  // Runs exactly once: OK with a slot held until Leave(), or RESOURCE_EXHAUSTED
  // naming the limit. It may run on the caller's thread, on a thread calling
  // Leave(), or on the expiry thread, so it must not block.
  using Admit = std::function<void(absl::Status)>;

  AdmissionGate(int max_in_flight, int max_queued, std::chrono::milliseconds queue_timeout);
  ~AdmissionGate();
  AdmissionGate(const AdmissionGate&) = delete;
  AdmissionGate& operator=(const AdmissionGate&) = delete;

  void EnterAsync(Admit admit);
  // Blocking form of EnterAsync.
  absl::Status Enter();
  void Leave();

  int in_flight() const;
  int queued() const;
  int64_t rejected() const;

 private:
  struct Waiter {
    std::chrono::steady_clock::time_point deadline;
    Admit admit;
  };
  void ExpireLoop();

  const int max_in_flight_;
  const int max_queued_;
  const std::chrono::milliseconds queue_timeout_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  // FIFO; every waiter gets the same timeout, so deadlines are in order.
  std::deque<Waiter> waiters_;
  int in_flight_ = 0;
  int64_t rejected_ = 0;
  bool stopping_ = false;
  std::thread expiry_;
};

}  // namespace floe
