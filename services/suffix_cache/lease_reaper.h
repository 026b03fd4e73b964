// LeaseReaper: the thread that expires a SuffixCacheStore's idle active
// requests. Every `period` it runs SuffixCacheStore::ExpireIdle (requests no
// call has named for longer than StoreOptions::request_lease are ended, their
// memory released) and logs each one as the structured event
// `request_expired` (namespace, request_id, idle_s, bytes). The store counts
// them (StoreStats::expired_total, floe_suffix_cache_expired_requests_total).
//
// Why: a worker renews its requests' leases with every Step; one that dies
// (kill -9, a lost node) never ends them, and without a lease their local
// trees would stay active forever, inside --max-bytes.
//
// Thread-safety: construct, Stop and destroy on one thread (main). The store
// must outlive the reaper; its waits are bounded by `period`, and Stop wakes
// it at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "services/suffix_cache/suffix_cache_store.h"

namespace floe::suffix_cache {

class LeaseReaper {
 public:
  // Starts the thread; `period` > 0.
  LeaseReaper(SuffixCacheStore* store, std::chrono::milliseconds period);
  ~LeaseReaper();  // Stop()
  LeaseReaper(const LeaseReaper&) = delete;
  LeaseReaper& operator=(const LeaseReaper&) = delete;

  // Wakes the thread and joins it (a sweep in progress finishes first).
  // Idempotent.
  void Stop();

  // The sweep period for a lease: a quarter of it, between 1 ms and 1 s, so
  // that a request expires within lease + period of its last call.
  static std::chrono::milliseconds PeriodFor(std::chrono::milliseconds lease);

 private:
  void Loop();

  SuffixCacheStore* store_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace floe::suffix_cache
