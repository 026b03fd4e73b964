// A small HTTP/1.1 server over Boost.Beast/Asio for APIs that stream: a few
// I/O threads serve every connection, and an exchange that waits or streams
// (server-sent events) holds no thread, so thousands of slow streams cost
// memory, not threads.
//
// Each request is handed to the Handler on an I/O thread with an Exchange; the
// handler answers it exactly once, either with Reply() or with StartStream(),
// Send()... and End(). Exchange methods are thread-safe (they post onto the
// connection's strand). Bounds: body and header sizes, connections, an idle
// keep-alive timeout and a per-write timeout, so a stalled reader is dropped.
// Under TLS the handshake shares the idle timeout; a hang-up is then noticed
// on the next write, or at once when the client closes TCP without a TLS
// close_notify.
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
  // A chunked response (for text/event-stream); then Send()s and one End().
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
  int max_connections = 8192;
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
  // Stops accepting, closes every connection and joins the I/O threads.
  virtual void Shutdown() = 0;
};

}  // namespace floe::http
