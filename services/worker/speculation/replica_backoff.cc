#include "services/worker/speculation/replica_backoff.h"

#include <algorithm>

namespace floe {

ReplicaBackoff::ReplicaBackoff(int num_replicas, BackoffOptions options)
    : options_(options), replicas_(static_cast<size_t>(std::max(0, num_replicas))) {
  for (Replica& r : replicas_) r.backoff = options_.initial_backoff;
}

ReplicaBackoff::Gate ReplicaBackoff::Admit(int replica, absl::Time now) {
  absl::MutexLock l(&mu_);
  Replica& r = replicas_.at(static_cast<size_t>(replica));
  if (r.up) return Gate::kSend;
  if (r.probe_out || now < r.next_probe) return Gate::kSkip;
  r.probe_out = true;
  return Gate::kProbe;
}

bool ReplicaBackoff::Report(int replica, bool ok, absl::Time now) {
  absl::MutexLock l(&mu_);
  Replica& r = replicas_.at(static_cast<size_t>(replica));
  if (ok) {
    const bool changed = !r.up;
    r = Replica{};
    r.backoff = options_.initial_backoff;
    return changed;
  }
  if (r.up) {
    if (++r.consecutive_failures < options_.failures_to_down) return false;
    r.up = false;
    r.backoff = options_.initial_backoff;
    r.next_probe = now + r.backoff;
    return true;
  }
  // A failed probe (or a call admitted before the replica went down).
  if (r.probe_out) {
    r.probe_out = false;
    r.backoff = std::min(2 * r.backoff, options_.max_backoff);
    r.next_probe = now + r.backoff;
  }
  return false;
}

bool ReplicaBackoff::up(int replica) const {
  absl::MutexLock l(&mu_);
  return replicas_.at(static_cast<size_t>(replica)).up;
}

}  // namespace floe
