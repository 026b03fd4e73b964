// Test helper: a blocking HTTP/1.1 client (Boost.Beast) for the router's
// OpenAI API, independent of the server code it tests: whole responses, and
// server-sent event streams read event by event (the reader decides when to
// stop, or to stall).
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

}  // namespace floe::testing
