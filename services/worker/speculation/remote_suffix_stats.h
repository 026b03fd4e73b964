// What the worker sees of its suffix-cache replicas, for /metrics: call
// latency by call kind, failures by reason, calls skipped while a replica is
// down, and per replica whether it is up, how often it went down and how many
// reconnect probes were sent. Written by RemoteSuffixSource (engine and
// lifecycle threads), read by WorkerMetrics at scrape time; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace floe {

class RemoteSuffixStats {
 public:
  enum Call { kStep, kStart, kEnd, kNumCalls };
  enum Failure { kTimeout, kUnavailable, kOther, kNumFailures };
  static const char* CallName(Call call);
  static const char* FailureName(Failure failure);
  // Upper bounds (seconds) of the latency histogram's buckets, +Inf implied.
  static constexpr std::array<double, 12> kLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                            0.05,   0.1,   0.25,   0.5,   1.0,  2.5};

  explicit RemoteSuffixStats(std::vector<std::string> replicas);

  void RecordCall(Call call, absl::Duration latency);
  void RecordFailure(Call call, Failure failure);
  void RecordSkipped(Call call);
  void RecordDroppedLifecycle();  // the lifecycle queue was full
  void RecordProbe(int replica);
  void RecordReplicaState(int replica, bool up);

  struct Latency {
    std::array<int64_t, kLatencyBounds.size() + 1> buckets{};  // not cumulative; last is +Inf
    double sum_s = 0;
    int64_t count = 0;
  };
  struct Replica {
    std::string address;
    bool up = true;
    int64_t went_down = 0;
    int64_t probes = 0;
  };
  struct Snapshot {
    std::array<Latency, kNumCalls> latency;
    std::array<std::array<int64_t, kNumFailures>, kNumCalls> failures{};
    std::array<int64_t, kNumCalls> skipped{};
    int64_t dropped_lifecycle = 0;
    std::vector<Replica> replicas;
  };
  Snapshot Read() const;

 private:
  mutable absl::Mutex mu_;
  Snapshot s_ ABSL_GUARDED_BY(mu_);
};

}  // namespace floe
