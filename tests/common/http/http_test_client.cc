#include "tests/common/http/http_test_client.h"

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

}  // namespace floe::testing
