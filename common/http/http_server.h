// A small HTTP/1.1 server over Boost.Beast/Asio for APIs that stream: a few
// I/O threads serve every connection, and an exchange that waits or streams
// (server-sent events) holds no thread, so thousands of slow streams cost
// memory, not threads.
//
// Each request is handed to the Handler on an I/O thread with an Exchange; the
// handler answers it exactly once, either with Reply() or with StartStream(),
// Send()... and End(). Exchange methods are thread-safe (they post onto the
// connection's strand). Bounds: body and header sizes, connections (in all,
// sized below the descriptor limit, and per client address), an idle
// keep-alive timeout and a per-write timeout, so a stalled reader is dropped.
// Under TLS the handshake shares the idle timeout; a hang-up is then noticed
// on the next write, or at once when the client closes TCP without a TLS
// close_notify.
//
// HTTP/1.1 as RFC 9112 has it: pipelined requests are answered in order (a
// client that pipelines and then half-closes still gets every answer; one
// that sends a request at a time and closes while it waits is gone, see
// OnClientGone); HTTP/1.0 clients get no chunking (a stream's end is the
// connection's); HEAD gets no body; `Expect: 100-continue` gets `100
// Continue` before the body is read, and a declared Content-Length over the
// limit a 413 without it; a header over its limit gets 431, however slowly
// it arrives. An answer that ends the connection is followed by a lingering
// close, so the client reads it rather than a reset. A failing accept
// (descriptors exhausted) is retried with a backoff, not in a loop.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace floe::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;
  std::string target;  // path and query, as sent
  std::string path;    // target without the query
  Headers headers;     // names lower-cased
  std::string body;
  // The first header with this (lower-case) name, or "".
  std::string_view Header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;
};

class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void Reply(Response response) = 0;
  // A streamed response (for text/event-stream): chunked, or to an HTTP/1.0
  // client delimited by the connection's close; then Send()s and one End().
  virtual void StartStream(int status, std::string content_type, Headers headers = {}) = 0;
  // `written` runs on an I/O thread once `data` is sent (true), or when the
  // client is gone (false). Sends are written in order.
  virtual void Send(std::string data, std::function<void(bool)> written) = 0;
  virtual void End() = 0;
  // Runs once, on an I/O thread, if the client disconnects before the
  // exchange ends: also noticed while nothing is being written.
  virtual void OnClientGone(std::function<void()> gone) = 0;
};

using Handler = std::function<void(Request, std::shared_ptr<Exchange>)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int threads = 2;
  size_t max_body_bytes = 4 << 20;
  size_t max_header_bytes = 16 << 10;
  // Connections in all; Start lowers it to what the descriptor limit allows
  // (RLIMIT_NOFILE's soft limit minus reserved_descriptors), see
  // Server::effective_max_connections(). Over it a new connection is closed.
  int max_connections = 8192;
  // Per client IP address, so that one client cannot take every connection;
  // over it the new connection is closed at once. <= 0: no per-client cap.
  // Behind a proxy every client is the proxy's address: size it for that.
  int max_connections_per_client = 512;
  // Descriptors left for the process's own work (files, backends, other
  // listeners) when the connection cap is sized from the descriptor limit.
  int reserved_descriptors = 64;
  std::chrono::seconds idle_timeout{30};   // keep-alive and request read
  std::chrono::seconds write_timeout{60};  // one write to a stalled reader
  // TLS (PEM files): with a certificate every connection is HTTPS; with a
  // client CA too, clients must present a certificate it signed (mTLS).
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
};

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options, Handler handler);
  virtual ~Server() = default;
  // host:port actually bound.
  virtual std::string address() const = 0;
  virtual int port() const = 0;
  virtual int connections() const = 0;
  // The connection cap in force: max_connections, or less when the
  // descriptor limit read at Start allows fewer (then logged).
  virtual int effective_max_connections() const = 0;
  // Stops accepting, closes every connection and joins the I/O threads.
  virtual void Shutdown() = 0;
};

}  // namespace floe::http
