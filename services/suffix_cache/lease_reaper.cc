#include "services/suffix_cache/lease_reaper.h"

#include <algorithm>

#include "common/log/log.h"

namespace floe::suffix_cache {

LeaseReaper::LeaseReaper(SuffixCacheStore* store, std::chrono::milliseconds period)
    : store_(store), period_(std::max(period, std::chrono::milliseconds(1))) {
  thread_ = std::thread([this] { Loop(); });
}

LeaseReaper::~LeaseReaper() { Stop(); }

void LeaseReaper::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::chrono::milliseconds LeaseReaper::PeriodFor(std::chrono::milliseconds lease) {
  return std::clamp(lease / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
}

void LeaseReaper::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, period_, [this] { return stop_; })) {
    l.unlock();
    for (const SuffixCacheStore::Expired& e : store_->ExpireIdle()) {
      LogEvent(LogLevel::kWarning, "suffix-cache", "request_expired",
               {{"namespace", e.ns},
                {"request_id", e.request_id},
                {"idle_s", static_cast<double>(e.idle.count()) / 1000.0},
                {"lease_s", static_cast<double>(store_->options().request_lease.count()) / 1000.0},
                {"bytes", e.bytes}});
    }
    l.lock();
  }
}

}  // namespace floe::suffix_cache
