// Bounds the router's load: at most `max_in_flight` requests are relayed at
// once, at most `max_queued` more wait (each no longer than `queue_timeout`),
// and anything beyond is refused at once with RESOURCE_EXHAUSTED, so overload
// costs a client a fast, retryable error rather than a hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/status/status.h"

namespace floe {

class AdmissionGate {
 public:
  AdmissionGate(int max_in_flight, int max_queued, std::chrono::milliseconds queue_timeout);

  // OK: a slot is held until Leave(). RESOURCE_EXHAUSTED naming the limit otherwise.
  absl::Status Enter();
  void Leave();

  int in_flight() const;
  int queued() const;
  int64_t rejected() const;

 private:
  const int max_in_flight_;
  const int max_queued_;
  const std::chrono::milliseconds queue_timeout_;
  mutable std::mutex mu_;
  std::condition_variable slot_free_;
  int in_flight_ = 0;
  int queued_ = 0;
  int64_t rejected_ = 0;
};

}  // namespace floe
