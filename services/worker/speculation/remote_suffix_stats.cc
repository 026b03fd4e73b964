#include "services/worker/speculation/remote_suffix_stats.h"

#include <algorithm>

namespace floe {

const char* RemoteSuffixStats::CallName(Call call) {
  switch (call) {
    case kStep: return "step";
    case kStart: return "start";
    case kEnd: return "end";
    case kNumCalls: break;
  }
  return "unknown";
}

const char* RemoteSuffixStats::FailureName(Failure failure) {
  switch (failure) {
    case kTimeout: return "timeout";
    case kUnavailable: return "unavailable";
    case kOther: return "other";
    case kNumFailures: break;
  }
  return "unknown";
}

RemoteSuffixStats::RemoteSuffixStats(std::vector<std::string> replicas) {
  for (std::string& address : replicas) s_.replicas.push_back(Replica{std::move(address)});
}

void RemoteSuffixStats::RecordCall(Call call, absl::Duration latency) {
  const double s = absl::ToDoubleSeconds(latency);
  const size_t bucket =
      std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), s) - kLatencyBounds.begin();
  absl::MutexLock l(&mu_);
  Latency& h = s_.latency[call];
  ++h.buckets[bucket];
  h.sum_s += s;
  ++h.count;
}

void RemoteSuffixStats::RecordFailure(Call call, Failure failure) {
  absl::MutexLock l(&mu_);
  ++s_.failures[call][failure];
}

void RemoteSuffixStats::RecordSkipped(Call call) {
  absl::MutexLock l(&mu_);
  ++s_.skipped[call];
}

void RemoteSuffixStats::RecordDroppedLifecycle() {
  absl::MutexLock l(&mu_);
  ++s_.dropped_lifecycle;
}

void RemoteSuffixStats::RecordProbe(int replica) {
  absl::MutexLock l(&mu_);
  ++s_.replicas.at(static_cast<size_t>(replica)).probes;
}

void RemoteSuffixStats::RecordReplicaState(int replica, bool up) {
  absl::MutexLock l(&mu_);
  Replica& r = s_.replicas.at(static_cast<size_t>(replica));
  if (r.up && !up) ++r.went_down;
  r.up = up;
}

RemoteSuffixStats::Snapshot RemoteSuffixStats::Read() const {
  absl::MutexLock l(&mu_);
  return s_;
}

}  // namespace floe
