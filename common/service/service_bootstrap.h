// What every Floe service (floe-router, floe-worker, floe-suffix-cache) does
// at start and at the end, once: the flags they share (--host, --port,
// --metrics-port, --drain-timeout-s, the --tls-* flags, --admin-key-file,
// --internal-key-file and --tls-allowed-peers, --reflection, the liveness
// probe's), TLS credentials, the admin keys, internal trust, the raised
// descriptor limit, the /metrics server, the gRPC server with health, its
// liveness watchdog, SIGTERM and the drain. A main composes it:
//
//   ServiceBootstrap boot(kSpec);           // first: blocks SIGTERM/SIGINT
//   boot.AddFlags(parser); ...parse...
//   if (auto exit = boot.Prepare()) return *exit;   // TLS, trust, descriptors
//   if (auto exit = boot.Start()) return *exit;     // admin keys, /metrics
//   ...build the service...
//   auto serving = boot.Serve({&service});   // after the services it serves
//   if (!serving) return 1;
//   boot.SetServing(true);
//   boot.WaitForTermination();              // logs "draining"
//   service.StartDraining(); boot.Drain([&] { return service.in_flight(); });
//   return boot.Stopped();
//
// Each step that can fail returns the process's exit code (2: a bad flag or
// file, printed as "PROGRAM: message"; 1: a listener that could not start,
// logged), nullopt to go on. Serve returns a scope instead: the gRPC server
// must stop before the services it calls into are destroyed, and those are
// the main's locals, declared after the bootstrap. What a service prints on
// stdout and logs stays its own: the spec names its lines.
//
// The liveness watchdog (common/rpc/liveness_watchdog.h) starts with the
// gRPC server and stops when SIGTERM arrives, before the drain.
//
// Thread: the main thread; metrics_server() and server() are for the
// main to hand to the components it builds.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/auth/api_keys.h"
#include "common/auth/internal_trust.h"
#include "common/log/startup_clock.h"
#include "common/metrics/metrics_server.h"
#include "common/rpc/liveness_watchdog.h"
#include "common/rpc/server_runner.h"
#include "common/rpc/termination_signal.h"
#include "common/rpc/tls.h"
#include "common/service/descriptor_limit.h"

namespace floe {

class ArgParser;

// How one service differs in what the bootstrap does for it.
struct ServiceSpec {
  const char* program;         // "floe-worker": error messages
  const char* component;       // "worker": log component; stdout "metrics COMPONENT URL"
  const char* listening_line;  // "worker listening on ": stdout, before the bound address
  // floe local reads the suffix cache's metrics line after its listening
  // line, the others' before.
  bool metrics_line_after_listening = false;
  int default_metrics_port = 0;
  int default_drain_timeout_s = 30;
  const char* drain_help = "seconds SIGTERM waits for running requests";
  // --admin-key-file's help and the warning logged without it; null: the
  // service has no such flag (the router's keys are --api-key-file).
  const char* admin_key_help = nullptr;
  const char* admin_calls_open_why = nullptr;
};

// The shared flags' values.
struct ServiceFlags {
  std::string host = "127.0.0.1";
  int port = 0;
  int metrics_port = 0;
  int drain_timeout_s = 30;
  TlsOptions tls;
  std::string admin_key_file;
  InternalTrustOptions internal_trust;
  bool reflection = false;
  int liveness_probe_interval_ms = 5000;
  int liveness_probe_failures = 3;
};

class ServiceBootstrap {
 public:
  // Construct first in main(), before any thread starts (TerminationSignal).
  explicit ServiceBootstrap(const ServiceSpec& spec);
  ~ServiceBootstrap();
  ServiceBootstrap(const ServiceBootstrap&) = delete;
  ServiceBootstrap& operator=(const ServiceBootstrap&) = delete;

  // Registers the shared flags on `parser`.
  void AddFlags(ArgParser& parser);
  const ServiceFlags& flags() const { return flags_; }

  // After parsing, before anything starts: checks the TLS and liveness
  // flags, loads internal trust, raises the descriptor limit (logged).
  std::optional<int> Prepare();
  // Loads --admin-key-file (or warns that the admin calls are open) and
  // starts /metrics unless --metrics-port -1 (its line printed now unless
  // the spec prints it after the listening line).
  std::optional<int> Start();
  // Stops the liveness watchdog and the gRPC server (no grace) when it goes
  // out of scope: hold it after the services the server calls into.
  class Serving {
   public:
    explicit Serving(ServiceBootstrap* boot) : boot_(boot) {}
    Serving(Serving&& other) noexcept : boot_(std::exchange(other.boot_, nullptr)) {}
    Serving& operator=(Serving&&) = delete;
    ~Serving() {
      if (boot_) boot_->StopServing();
    }

   private:
    ServiceBootstrap* boot_;
  };
  // Starts the gRPC server on --host:--port with `services`, health
  // (NOT_SERVING) and `base`'s tuning (its address, TLS and reflection come
  // from the flags); prints the listening line, flushes stdout, ends the
  // start-up phase "grpc_start" and starts the liveness watchdog. nullopt:
  // it could not listen (logged "listen_failed"; exit 1).
  [[nodiscard]] std::optional<Serving> Serve(const std::vector<grpc::Service*>& services, ServerOptions base = {});
  void SetServing(bool serving) { server_->SetServing(serving); }

  // Blocks until SIGTERM or SIGINT, running `tick` (if any) every
  // `tick_period` meanwhile; then stops the watchdog and logs "draining".
  // Returns the signal.
  int WaitForTermination(const std::function<void()>& tick = nullptr,
                         std::chrono::milliseconds tick_period = std::chrono::milliseconds(200));
  // NOT_SERVING, waits up to --drain-timeout-s for `in_flight` to reach 0,
  // then shuts the gRPC server down.
  void Drain(const std::function<int()>& in_flight);
  // Logs "stopped"; returns 0, the exit code of a clean stop.
  int Stopped();

  // Prints "PROGRAM: message" on stderr; returns 2 (a usage error's exit code).
  int UsageError(const std::string& message) const;

  StartupClock& startup() { return startup_; }
  TerminationSignal& termination() { return termination_; }
  // Credentials for outgoing channels (valid after Prepare).
  const std::shared_ptr<grpc::ChannelCredentials>& channel_credentials() const { return channel_credentials_; }
  // Null or disabled when internal trust is off (after Prepare).
  const std::shared_ptr<const InternalTrust>& internal_trust() const { return internal_trust_; }
  // Null without --admin-key-file (after Start).
  const ApiKeys* admin_keys() const { return admin_keys_ ? &*admin_keys_ : nullptr; }
  // Null with --metrics-port -1 (after Start).
  MetricsServer* metrics_server() const { return metrics_server_.get(); }
  // After Serve.
  ServerRunner* server() const { return server_.get(); }
  const DescriptorLimits& descriptor_limits() const { return descriptor_limits_; }

 private:
  void PrintMetricsLine() const;
  void StopServing();

  const ServiceSpec spec_;
  TerminationSignal termination_;  // first: before any thread starts
  StartupClock startup_;
  ServiceFlags flags_;
  DescriptorLimits descriptor_limits_;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  std::shared_ptr<const InternalTrust> internal_trust_;
  std::optional<ApiKeys> admin_keys_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<ServerRunner> server_;
  std::unique_ptr<LivenessWatchdog> watchdog_;
};

}  // namespace floe
