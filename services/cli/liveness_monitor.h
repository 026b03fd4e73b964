// Liveness of the services `floe local` supervises: a process can live on
// while it no longer answers (SIGSTOPped, deadlocked, its gRPC port dead
// after descriptor exhaustion), and a death watch never sees that. Each
// watched service's grpc.health.v1.Health/Check ("" service) is called once
// per `interval` under `deadline`; once the service has answered SERVING
// (it is ready: a worker still loading answers NOT_SERVING and is not
// judged), `failures` unanswered checks in a row (an RPC error: deadline,
// refused connection, ...) make it hung, and Poll reports it once. An
// answer of any status resets the count: a service that answers NOT_SERVING
// is alive (draining, say) and not this monitor's business.
//
// Checks run asynchronously (gRPC callbacks), at most one in flight per
// service, so one hung service delays neither the others' checks nor the
// caller. Thread: every method from one thread (the supervisor's); the
// callbacks touch only their own check's state.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace floe {

class LivenessMonitor {
 public:
  struct Options {
    std::chrono::milliseconds interval{1000};  // from one check's start to the next's
    std::chrono::milliseconds deadline{2000};  // per check
    int failures = 3;                          // unanswered checks in a row that make a ready service hung
  };
  // What Poll found: a ready service that stopped answering.
  struct Verdict {
    size_t id = 0;
    int failed_checks = 0;
    std::string reason;  // says how many checks failed and the last one's error
  };

  // `credentials` are those of the cluster's own channels (TLS, mTLS);
  // `bearer`, when not empty, goes with every check as "authorization:
  // Bearer ..." (the internal key: harmless where health is open).
  LivenessMonitor(Options options, std::shared_ptr<grpc::ChannelCredentials> credentials, std::string bearer = "");
  // Cancels the checks in flight and waits for their callbacks (each is
  // bounded by its deadline).
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  // Starts (or restarts, after the process was replaced) watching `id` at
  // the gRPC address "host:port": not ready until it answers SERVING, on a
  // fresh channel (an old one may sit in reconnect backoff).
  void Watch(size_t id, const std::string& address);
  // Stops watching `id` (its process is gone); a check in flight is dropped.
  void Forget(size_t id);

  // Checks every watched service now (one without a check in flight gets
  // one) and waits for those checks (each bounded by its deadline), then
  // Polls: what the caller prints after it (floe local: "router listening")
  // comes after every service that is ready was seen ready.
  std::vector<Verdict> CheckAllNow();

  // Collects finished checks and starts due ones. Returns each service
  // found hung since the last call; that service is then no longer watched
  // (Watch it again once its replacement runs).
  std::vector<Verdict> Poll();

  // For tests and logs: whether `id` has answered SERVING, and how many of
  // its checks have finished since Watch (answered or not).
  bool ready(size_t id) const;
  int checks_finished(size_t id) const;

 private:
  struct Check;  // one RPC in flight, shared with its callback
  struct Watched {
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<Check> in_flight;
    std::chrono::steady_clock::time_point next_check;
    bool ready = false;
    int consecutive_failures = 0;
    int checks_finished = 0;
  };

  void Start(Watched& watched);

  Options options_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string bearer_;
  std::map<size_t, Watched> watched_;
  std::vector<std::shared_ptr<Check>> abandoned_;  // Forgotten while in flight: waited for at destruction
};

}  // namespace floe
