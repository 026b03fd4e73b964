// Starts a gRPC server the way every Floe service needs it: the given
// services, grpc.health.v1.Health (NOT_SERVING until SetServing(true)), a
// bounded message size, TLS/mTLS when configured, server reflection only
// when asked for (it lists every method to whoever connects), and one
// listening socket per resolved address: port 0 is one free port, the one
// address() reports, and a port another process listens on is an error,
// never shared (no SO_REUSEPORT).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/rpc/tls.h"

namespace floe {

struct ServerOptions {
  std::string address = "127.0.0.1:0";  // port 0 picks a free port
  int max_message_bytes = 16 << 20;
  // Upper bound on threads serving synchronous calls (each stream holds one).
  int max_threads = 512;
  TlsOptions tls;
  bool reflection = false;
};

class ServerRunner {
 public:
  // Starts serving at once; `services` must outlive the runner.
  static absl::StatusOr<std::unique_ptr<ServerRunner>> Start(const ServerOptions& options,
                                                             const std::vector<grpc::Service*>& services);
  ~ServerRunner();

  // "host:port" actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // Overall health ("" service) and each registered service name.
  void SetServing(bool serving);
  // Stops accepting calls; waits up to `grace` for running ones, then cancels them.
  void Shutdown(std::chrono::milliseconds grace);
  // Graceful drain: NOT_SERVING at once (load balancers stop sending), then
  // waits until `in_flight()` reaches 0 or `timeout` passes, then Shutdown.
  void DrainAndShutdown(const std::function<int()>& in_flight, std::chrono::milliseconds timeout);
  grpc::Server* server() { return server_.get(); }

 private:
  ServerRunner() = default;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> service_names_;
  std::string address_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace floe
