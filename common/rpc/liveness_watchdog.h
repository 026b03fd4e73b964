// A service's watch over its own gRPC listener (issue 41). A process can
// live on while its port no longer accepts: gRPC 1.51's accept loop logs
// "Failed accept4: Too many open files" once on EMFILE and never accepts
// again, so health checks time out while nothing restarts the process. The
// watchdog opens a fresh channel to its own port every `interval` (a fresh
// connection, so the probe goes through accept; a kept one would not) and
// calls grpc.health.v1.Health/Check under `deadline`. Any answer, SERVING
// or not, is alive: a worker still loading its model answers NOT_SERVING.
//
// It arms on its first answer: a probe that never succeeded (a listener the
// probe cannot reach, say) proves nothing, and a watchdog that then killed
// a working service would be worse than none ("liveness_unarmed" warning
// after `failures` unanswered probes). Once armed, `failures` unanswered
// probes in a row log "liveness_failed" (error, naming the listener and the
// last error) and call `on_dead`, by default std::_Exit(1): the process is
// wedged, so no destructor runs, and its supervisor (floe local,
// Kubernetes) starts a new one.
//
// Thread: one thread of its own; Stop() (and the destructor) from any other
// thread. Stop before draining: a draining server refuses new calls.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/rpc/tls.h"

namespace floe {

// How a probe dials: its credentials and, under TLS, a name the listener's
// certificate holds, so gRPC's name check passes without a log line each
// probe ("": the dialled host).
struct ProbeCredentials {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string target_name;
};

struct LivenessOptions {
  std::chrono::milliseconds interval{5000};  // from one probe's start to the next; 0: no watchdog
  std::chrono::milliseconds deadline{3000};  // per probe
  int failures = 3;                          // unanswered probes in a row that end the process
};

class LivenessWatchdog {
 public:
  // `component` names the service in its log events; `target` is the
  // "host:port" the probe dials (ProbeTarget); `on_dead` runs on the
  // watchdog's thread (null: std::_Exit(1)).
  LivenessWatchdog(const char* component, std::string target, ProbeCredentials credentials, LivenessOptions options,
                   std::function<void()> on_dead = nullptr);
  ~LivenessWatchdog();
  LivenessWatchdog(const LivenessWatchdog&) = delete;
  LivenessWatchdog& operator=(const LivenessWatchdog&) = delete;

  // No probe starts after it returns; waits for the one in flight (bounded
  // by its deadline). Idempotent.
  void Stop();
  // For tests and logs.
  bool armed() const;
  int probes() const;

 private:
  void Run();
  // OK when the listener answered; the RPC's error otherwise.
  grpc::Status Probe();

  const char* component_;
  const std::string target_;
  const ProbeCredentials credentials_;
  const LivenessOptions options_;
  const std::function<void()> on_dead_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  bool armed_ = false;     // guarded by mu_
  int probes_ = 0;         // guarded by mu_
  std::thread thread_;     // last: starts once the rest is constructed
};

// grpc.health.v1.Health/Check, called without generated code (Debian ships
// no health.proto for C++): the overall health's request ("" service)
// serializes to no bytes.
inline constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

// One grpc.health.v1.Health/Check of the overall health ("" service) on
// `channel` under `deadline`: OK when the server answered (whatever its
// serving status), the RPC's error otherwise.
grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, std::chrono::milliseconds deadline);

// What a self-probe dials for a listener bound to `host`:`port`: a wildcard
// host ("0.0.0.0", "::", "[::]", "") becomes loopback.
std::string ProbeTarget(const std::string& host, int port);

// The credentials of a probe to this process's own listener: insecure when
// it speaks plaintext; else TLS that does not verify the server (the probe
// dials loopback, which the certificate need not name; it sends no secret)
// and, under mTLS, presents this process's certificate.
absl::StatusOr<ProbeCredentials> MakeProbeCredentials(const TlsOptions& tls);

// A name the first certificate in `pem` is valid for: its first DNS or IP
// subjectAltName, else its common name, a wildcard's "*" made a label; ""
// when it has none or `pem` holds no certificate.
std::string CertificateName(const std::string& pem);

}  // namespace floe
