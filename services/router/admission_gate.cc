#include "services/router/admission_gate.h"

#include "absl/strings/str_cat.h"

namespace floe {

AdmissionGate::AdmissionGate(int max_in_flight, int max_queued, std::chrono::milliseconds queue_timeout)
    : max_in_flight_(max_in_flight), max_queued_(max_queued), queue_timeout_(queue_timeout) {}

absl::Status AdmissionGate::Enter() {
  std::unique_lock<std::mutex> lock(mu_);
  if (in_flight_ < max_in_flight_) {
    ++in_flight_;
    return absl::OkStatus();
  }
  if (queued_ >= max_queued_) {
    ++rejected_;
    return absl::ResourceExhaustedError(absl::StrCat("router overloaded: ", in_flight_,
                                                     " requests in flight (max_in_flight = ", max_in_flight_,
                                                     ") and ", queued_, " queued (max_queued = ", max_queued_,
                                                     "); retry later"));
  }
  ++queued_;
  bool admitted = slot_free_.wait_for(lock, queue_timeout_, [&] { return in_flight_ < max_in_flight_; });
  --queued_;
  if (!admitted) {
    ++rejected_;
    return absl::ResourceExhaustedError(absl::StrCat("router overloaded: no slot within queue_timeout = ",
                                                     queue_timeout_.count(), " ms"));
  }
  ++in_flight_;
  return absl::OkStatus();
}

void AdmissionGate::Leave() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
  }
  slot_free_.notify_one();
}

int AdmissionGate::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}
int AdmissionGate::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}
int64_t AdmissionGate::rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

}  // namespace floe
