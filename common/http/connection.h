// Internal to common/http: one client connection of a Server, plain or
// TLS, from its first byte to its close: reading requests (HTTP/1.0 and 1.1,
// pipelined, `Expect: 100-continue`, header and body limits), handing each
// to the Server's Handler with an Exchange, writing its answer, and the
// lingering close. Everything a connection does runs on its own strand of
// the server's io_context; Exchange calls from other threads are posted
// there. Not for use outside common/http.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/http/connection_limits.h"
#include "common/http/http_server.h"

namespace floe::http::internal {

// What Shutdown needs of a connection, plain or TLS.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Once the I/O threads have stopped: drops the exchange (which holds its
  // connection: a cycle that only the exchange's end breaks) and the queued
  // writes, so that a connection still in an exchange is freed too.
  virtual void ReleaseForShutdown() = 0;
};

// What a Server shares with its connections: fixed options and handler, and
// the counts and list that connections come and go from (thread-safe).
struct ServerState {
  ServerState(const ServerOptions& o, Handler h, int max_connections)
      : options(o), handler(std::move(h)), limits(max_connections, o.max_connections_per_client) {}
  const ServerOptions options;
  const Handler handler;
  ConnectionLimits limits;
  std::mutex live_mu;
  std::vector<std::weak_ptr<ConnectionBase>> live;  // guarded by live_mu; pruned on each accept
};

// Serves `socket` (TLS when `tls` is given) until the client leaves, the
// connection ends, or the server shuts down. `client` is the address under
// which state->limits admitted it; the connection releases it when it is
// destroyed. Call on any thread; the connection runs on the io_context the
// socket belongs to.
std::shared_ptr<ConnectionBase> ServeConnection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerState> state,
                                                std::string client, boost::asio::ssl::context* tls);

}  // namespace floe::http::internal
