// Test helper: a blocking HTTP/1.1 client (Boost.Beast) for the router's
// OpenAI API, independent of the server code it tests: whole responses,
// server-sent event streams read event by event (the reader decides when to
// stop, or to stall), and raw connections for protocol edges.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace floe::testing {

struct HttpResult {
  int status = 0;  // 0: the connection failed (see error)
  std::string error;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::string Header(const std::string& name) const;
};

HttpResult HttpRequest(const std::string& address, const std::string& method, const std::string& path,
                       const std::string& body = "", std::vector<std::pair<std::string, std::string>> headers = {},
                       int timeout_ms = 60000);

// A streamed POST. Events are the `data:` payloads, "[DONE]" included.
class SseStream {
 public:
  // receive_buffer_bytes > 0 shrinks the socket's receive buffer (a reader
  // that stalls then pushes back on the server quickly).
  SseStream(const std::string& address, const std::string& path, const std::string& body,
            int receive_buffer_bytes = 0, int timeout_ms = 60000);
  ~SseStream();
  int status();  // HTTP status (reads the header); 0 on failure
  // The next event; false at the end of the stream or on error.
  bool Next(std::string* data);
  // Hangs up at once.
  void Close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A raw TCP connection for protocol tests: bytes exactly as written (pipelined
// requests, HTTP/1.0, header floods, `Expect: 100-continue`), from any
// loopback source address (127.0.0.2 looks like a second client to a
// per-address cap; the whole 127/8 is loopback on Linux). Every read waits at
// most its deadline.
class RawConnection {
 public:
  // Connects to `address` ("host:port") from `source_ip` ("": the kernel's
  // choice); connected() says whether it worked.
  explicit RawConnection(const std::string& address, const std::string& source_ip = "", int timeout_ms = 10000);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool Send(const std::string& bytes);
  // Reads until `done(received())` holds, the server closes (EOF or reset) or
  // `timeout_ms` passes; returns whether `done` held.
  bool ReadUntil(const std::function<bool(const std::string&)>& done, int timeout_ms = 10000);
  // Reads until the server closes; false when `timeout_ms` passed first.
  bool ReadToClose(int timeout_ms = 10000);
  const std::string& received() const { return received_; }
  bool closed() const { return closed_; }  // by the server: EOF or reset
  // Hangs up with a reset (SO_LINGER 0), leaving no TIME_WAIT behind.
  void Reset();

 private:
  int fd_ = -1;
  std::string received_;
  bool closed_ = false;
};

// The address in a floe binary's "http bound to HOST:PORT" line among
// `lines` (its stdout); "" when there is none.
std::string HttpBoundAddress(const std::vector<std::string>& lines);

// One response off the wire, as a client independent of the server parses it.
struct WireResponse {
  int status = 0;
  unsigned version = 0;  // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool chunked = false;
  bool has_content_length = false;
  std::string Header(const std::string& name) const;
};

// Splits `bytes` into the responses it holds (interim 1xx ones included, in
// order). `closed`: the bytes end where the server closed, which ends a
// close-delimited body. `head[i]`: response i answers a HEAD (no body).
// Bytes that do not finish a response are left in `*rest` (may be null);
// a malformed response sets `*error`.
std::vector<WireResponse> ParseResponses(const std::string& bytes, bool closed, std::string* rest = nullptr,
                                         std::string* error = nullptr, const std::vector<bool>& head = {});

}  // namespace floe::testing
