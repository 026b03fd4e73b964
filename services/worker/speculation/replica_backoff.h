// When to call a suffix-cache replica: a circuit breaker with exponential
// backoff, so a dead or stopped replica costs the engine nothing but a probe
// now and then.
//
// A replica is up until `failures_to_down` calls in a row fail at the
// transport (deadline, unavailable); then it is down and no call goes out
// except one probe once the backoff has passed. The probe's success brings it
// back up (backoff reset); its failure doubles the backoff, up to
// max_backoff. gRPC reconnects the channel underneath on its own schedule;
// this only keeps callers from queueing doomed calls meanwhile.
//
// Thread-safe (engine thread for Step, the lifecycle thread for Start/End).
// Time is passed in, so tests drive it.
#pragma once

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace floe {

struct BackoffOptions {
  int failures_to_down = 3;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
};

class ReplicaBackoff {
 public:
  enum class Gate { kSend, kProbe, kSkip };

  ReplicaBackoff(int num_replicas, BackoffOptions options);

  // kSend while up; while down kProbe for one caller once the backoff has
  // passed (until it reports), kSkip otherwise.
  Gate Admit(int replica, absl::Time now);
  // The outcome of a call Admit let through (transport-level: a call the
  // replica answered is a success whatever its entries say). Returns true
  // when the replica just went down or came back up.
  bool Report(int replica, bool ok, absl::Time now);

  bool up(int replica) const;

 private:
  struct Replica {
    bool up = true;
    int consecutive_failures = 0;
    bool probe_out = false;
    absl::Duration backoff;
    absl::Time next_probe;
  };
  BackoffOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Replica> replicas_ ABSL_GUARDED_BY(mu_);
};

}  // namespace floe
