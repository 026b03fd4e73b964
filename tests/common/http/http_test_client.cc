#include "tests/common/http/http_test_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/ascii.h"
#include "common/http/client.h"

namespace floe::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

template <typename Start>
beast::error_code Run(asio::io_context& io, beast::tcp_stream& stream, int timeout_ms, Start start) {
  return http::RunFor(io, stream, std::chrono::milliseconds(timeout_ms), std::move(start));
}

beast::error_code Connect(const std::string& address, int timeout_ms, int receive_buffer_bytes,
                          asio::io_context& io, beast::tcp_stream& stream) {
  const size_t colon = address.rfind(':');
  beast::error_code ec;
  tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(address.substr(0, colon), address.substr(colon + 1), ec);
  if (ec) return ec;
  stream.socket().open(tcp::v4(), ec);
  if (!ec && receive_buffer_bytes > 0)
    stream.socket().set_option(asio::socket_base::receive_buffer_size(receive_buffer_bytes), ec);
  if (ec) return ec;
  return Run(io, stream, timeout_ms, [&](auto done) {
    stream.async_connect(*endpoints.begin(), [done](beast::error_code e) { done(e); });
  });
}

}  // namespace

std::string HttpResult::Header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return "";
}

HttpResult HttpRequest(const std::string& address, const std::string& method, const std::string& path,
                       const std::string& body, std::vector<std::pair<std::string, std::string>> headers,
                       int timeout_ms) {
  HttpResult result;
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec = Connect(address, timeout_ms, 0, io, stream);
  bhttp::request<bhttp::string_body> request(bhttp::string_to_verb(method), path, 11);
  request.set(bhttp::field::host, address);
  if (!body.empty()) request.set(bhttp::field::content_type, "application/json");
  for (auto& [k, v] : headers) request.set(k, v);
  request.body() = body;
  request.prepare_payload();
  if (!ec) ec = Run(io, stream, timeout_ms, [&](auto done) { bhttp::async_write(stream, request, done); });
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 << 20);
  if (!ec) ec = Run(io, stream, timeout_ms, [&](auto done) { bhttp::async_read(stream, buffer, parser, done); });
  if (ec) {
    result.error = ec.message();
    return result;
  }
  result.status = parser.get().result_int();
  for (const auto& field : parser.get())
    result.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())), std::string(field.value()));
  result.body = parser.get().body();
  return result;
}

struct SseStream::Impl {
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  http::SseParser events;
  int timeout_ms = 0;
  bool header_read = false;
  bool failed = false;
  int status = 0;

  void ReadHeader() {
    if (header_read || failed) return;
    header_read = true;
    parser.body_limit(boost::none);
    beast::error_code ec =
        Run(io, stream, timeout_ms, [&](auto done) { bhttp::async_read_header(stream, buffer, parser, done); });
    if (ec == bhttp::error::need_buffer) ec = {};  // body bytes came with the header
    if (ec) {
      failed = true;
      return;
    }
    status = parser.get().result_int();
  }
};

SseStream::SseStream(const std::string& address, const std::string& path, const std::string& body,
                     int receive_buffer_bytes, int timeout_ms)
    : impl_(std::make_unique<Impl>()) {
  impl_->timeout_ms = timeout_ms;
  beast::error_code ec = Connect(address, timeout_ms, receive_buffer_bytes, impl_->io, impl_->stream);
  bhttp::request<bhttp::string_body> request(bhttp::verb::post, path, 11);
  request.set(bhttp::field::host, address);
  request.set(bhttp::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  if (!ec)
    ec = Run(impl_->io, impl_->stream, timeout_ms, [&](auto done) { bhttp::async_write(impl_->stream, request, done); });
  impl_->failed = static_cast<bool>(ec);
}

SseStream::~SseStream() { Close(); }

int SseStream::status() {
  impl_->ReadHeader();
  return impl_->status;
}

bool SseStream::Next(std::string* data) {
  impl_->ReadHeader();
  for (;;) {
    if (impl_->events.Next(data)) return true;
    if (impl_->failed || impl_->status == 0 || impl_->parser.is_done()) return false;
    char chunk[4096];
    impl_->parser.get().body().data = chunk;
    impl_->parser.get().body().size = sizeof chunk;
    beast::error_code ec = Run(impl_->io, impl_->stream, impl_->timeout_ms, [&](auto done) {
      bhttp::async_read_some(impl_->stream, impl_->buffer, impl_->parser, done);
    });
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) {
      impl_->failed = true;
      return false;
    }
    impl_->events.Feed(std::string_view(chunk, sizeof chunk - impl_->parser.get().body().size));
  }
}

void SseStream::Close() {
  beast::error_code ignored;
  if (impl_->stream.socket().is_open()) {
    impl_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    impl_->stream.socket().close(ignored);
  }
  impl_->failed = true;
}

namespace {

using Clock = std::chrono::steady_clock;

int MillisecondsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
bool PollFor(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = poll(&p, 1, MillisecondsLeft(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

}  // namespace

RawConnection::RawConnection(const std::string& address, const std::string& source_ip, int timeout_ms) {
  const size_t colon = address.rfind(':');
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (colon == std::string::npos ||
      getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints, &found) != 0)
    return;
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  bool ok = fd >= 0;
  if (ok && !source_ip.empty()) {
    sockaddr_in source{};
    source.sin_family = AF_INET;
    ok = inet_pton(AF_INET, source_ip.c_str(), &source.sin_addr) == 1 &&
         bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) == 0;
  }
  if (ok && connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    ok = errno == EINPROGRESS && PollFor(fd, POLLOUT, Clock::now() + std::chrono::milliseconds(timeout_ms));
    int error = 0;
    socklen_t length = sizeof error;
    ok = ok && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
  }
  freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) close(fd);
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // each Send its own segment
  fd_ = fd;
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) close(fd_);
}

bool RawConnection::Send(const std::string& bytes) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!PollFor(fd_, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool RawConnection::ReadUntil(const std::function<bool(const std::string&)>& done, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done(received_)) {
    if (closed_ || fd_ < 0 || !PollFor(fd_, POLLIN, deadline)) return false;
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n > 0) {
      received_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      closed_ = true;
    }
  }
  return true;
}

bool RawConnection::ReadToClose(int timeout_ms) {
  ReadUntil([this](const std::string&) { return closed_; }, timeout_ms);
  return closed_;
}

void RawConnection::Reset() {
  if (fd_ < 0) return;
  const linger hard{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(fd_);
  fd_ = -1;
}

std::string HttpBoundAddress(const std::vector<std::string>& lines) {
  constexpr std::string_view kPrefix = "http bound to ";
  for (const std::string& line : lines)
    if (line.rfind(kPrefix, 0) == 0) return line.substr(kPrefix.size());
  return "";
}

std::string WireResponse::Header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return "";
}

std::vector<WireResponse> ParseResponses(const std::string& bytes, bool closed, std::string* rest,
                                         std::string* error, const std::vector<bool>& head) {
  std::vector<WireResponse> out;
  size_t at = 0;
  while (at < bytes.size()) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    parser.body_limit(boost::none);
    parser.header_limit(1 << 20);
    // An interim 1xx answer never has a body, so it never takes HEAD's place.
    const size_t finals = static_cast<size_t>(
        std::count_if(out.begin(), out.end(), [](const WireResponse& r) { return r.status >= 200; }));
    if (finals < head.size() && head[finals]) parser.skip(true);
    beast::error_code ec;
    size_t used = 0;
    while (!ec && !parser.is_done() && at + used < bytes.size()) {
      const size_t n = parser.put(asio::buffer(bytes.data() + at + used, bytes.size() - at - used), ec);
      used += n;
      if (ec == bhttp::error::need_more && n == 0) break;
      if (ec == bhttp::error::need_more) ec = {};
    }
    if (ec == bhttp::error::need_more) ec = {};
    if (!ec && !parser.is_done() && closed && parser.got_some()) parser.put_eof(ec);
    if (ec) {
      if (error != nullptr) *error = ec.message();
      break;
    }
    if (!parser.is_done()) break;
    WireResponse r;
    r.status = parser.get().result_int();
    r.version = parser.get().version();
    for (const auto& field : parser.get())
      r.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())), std::string(field.value()));
    r.body = parser.get().body();
    r.chunked = parser.chunked();
    r.has_content_length = parser.content_length().has_value();
    out.push_back(std::move(r));
    at += used;
  }
  if (rest != nullptr) *rest = bytes.substr(at);
  return out;
}

}  // namespace floe::testing
