// The client side of common/http, for the bench's HTTP backend and tests:
// one blocking Beast operation bounded by a deadline (plain sockets have
// none; SO_RCVTIMEO does not bound Asio's blocking reads), and the framing
// of server-sent events. Header-only; no shared state.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace floe::http {

// Starts one asynchronous operation on `stream` (start(done), done(ec[, n]))
// and runs `io` until it completes or `timeout` passes (beast::error::timeout).
template <typename Start>
boost::beast::error_code RunFor(boost::asio::io_context& io, boost::beast::tcp_stream& stream,
                                std::chrono::steady_clock::duration timeout, Start start) {
  boost::beast::error_code result = boost::asio::error::would_block;
  stream.expires_after(timeout);
  start([&result](boost::beast::error_code ec, size_t = 0) { result = ec; });
  io.restart();
  io.run();
  return result;
}

// Bytes of an event stream in, the `data:` payload of each complete event out.
class SseParser {
 public:
  void Feed(std::string_view bytes) { pending_.append(bytes); }
  bool Next(std::string* data) {
    for (size_t end; (end = pending_.find("\n\n")) != std::string::npos;) {
      const bool is_data = pending_.compare(0, 6, "data: ") == 0 && end >= 6;
      if (is_data) *data = pending_.substr(6, end - 6);
      pending_.erase(0, end + 2);
      if (is_data) return true;
    }
    return false;
  }

 private:
  std::string pending_;  // bytes not yet ending an event
};

}  // namespace floe::http
