#include "services/router/admission_gate.h"

#include <future>
#include <vector>

#include "absl/strings/str_cat.h"

namespace floe {

AdmissionGate::AdmissionGate(int max_in_flight, int max_queued, std::chrono::milliseconds queue_timeout)
    : max_in_flight_(max_in_flight),
      max_queued_(max_queued),
      queue_timeout_(queue_timeout),
      expiry_([this] { ExpireLoop(); }) {}

AdmissionGate::~AdmissionGate() {
  std::deque<Waiter> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    left.swap(waiters_);
  }
  changed_.notify_all();
  expiry_.join();
  for (Waiter& w : left) w.admit(absl::UnavailableError("router is shutting down"));
}

void AdmissionGate::EnterAsync(Admit admit) {
  absl::Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ < max_in_flight_ && waiters_.empty()) {
      ++in_flight_;
    } else if (static_cast<int>(waiters_.size()) >= max_queued_) {
      ++rejected_;
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "router overloaded: ", in_flight_, " requests in flight (max_in_flight = ", max_in_flight_, ") and ",
          waiters_.size(), " queued (max_queued = ", max_queued_, "); retry later"));
    } else {
      waiters_.push_back({std::chrono::steady_clock::now() + queue_timeout_, std::move(admit)});
      changed_.notify_all();
      return;
    }
  }
  admit(refused);
}

absl::Status AdmissionGate::Enter() {
  std::promise<absl::Status> result;
  EnterAsync([&result](absl::Status s) { result.set_value(std::move(s)); });
  return result.get_future().get();
}

void AdmissionGate::Leave() {
  Admit next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiters_.empty()) {
      --in_flight_;
      return;
    }
    // The slot passes straight to the oldest waiter.
    next = std::move(waiters_.front().admit);
    waiters_.pop_front();
  }
  next(absl::OkStatus());
}

void AdmissionGate::ExpireLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (waiters_.empty()) {
      changed_.wait(lock);
      continue;
    }
    const auto deadline = waiters_.front().deadline;
    if (std::chrono::steady_clock::now() < deadline) {
      changed_.wait_until(lock, deadline);
      continue;
    }
    std::vector<Admit> expired;
    const auto now = std::chrono::steady_clock::now();
    while (!waiters_.empty() && waiters_.front().deadline <= now) {
      expired.push_back(std::move(waiters_.front().admit));
      waiters_.pop_front();
      ++rejected_;
    }
    lock.unlock();
    for (Admit& admit : expired)
      admit(absl::ResourceExhaustedError(
          absl::StrCat("router overloaded: no slot within queue_timeout = ", queue_timeout_.count(), " ms")));
    lock.lock();
  }
}

int AdmissionGate::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}
int AdmissionGate::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiters_.size());
}
int64_t AdmissionGate::rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

}  // namespace floe
