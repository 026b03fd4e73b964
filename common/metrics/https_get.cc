#include "common/metrics/https_get.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/str_cat.h"
#include "common/http/client.h"

namespace floe::internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;

constexpr size_t kMaxBodyBytes = 64 << 20;

}  // namespace

absl::StatusOr<std::string> HttpsGet(const std::string& host, int port, const std::string& target,
                                     const HttpGetOptions& options) {
  ssl::context context(ssl::context::tls_client);
  beast::error_code ec;
  if (options.ca_file.empty()) {
    context.set_default_verify_paths(ec);
  } else {
    context.load_verify_file(options.ca_file, ec);
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("CA file ", options.ca_file, ": ", ec.message()));
  if (!options.cert_file.empty()) {
    context.use_certificate_chain_file(options.cert_file, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("certificate ", options.cert_file, ": ", ec.message()));
    context.use_private_key_file(options.key_file, ssl::context::pem, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("key ", options.key_file, ": ", ec.message()));
  }
  context.set_verify_mode(ssl::verify_peer);

  asio::io_context io;
  beast::ssl_stream<beast::tcp_stream> stream(io, context);
  // The certificate must name the host we dialled: an IP SAN for an address,
  // a DNS SAN (and SNI) for a name.
  X509_VERIFY_PARAM* verify = SSL_get0_param(stream.native_handle());
  asio::ip::make_address(host, ec);
  const bool is_ip = !ec;
  if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(verify, host.c_str()) != 1
            : (X509_VERIFY_PARAM_set1_host(verify, host.c_str(), host.size()) != 1 ||
               SSL_set_tlsext_host_name(stream.native_handle(), host.c_str()) != 1)) {
    return absl::InvalidArgumentError("cannot verify against host " + host);
  }
  const std::string where = absl::StrCat(host, ":", port);
  asio::ip::tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", ec.message()));

  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  auto left = [&] { return deadline - std::chrono::steady_clock::now(); };
  beast::tcp_stream& tcp = beast::get_lowest_layer(stream);
  ec = http::RunFor(io, tcp, left(), [&](auto done) {
    tcp.async_connect(endpoints, [done](beast::error_code e, const auto&) { done(e); });
  });
  if (ec) return absl::UnavailableError(absl::StrCat("cannot connect to ", where, ": ", ec.message()));
  ec = http::RunFor(io, tcp, left(), [&](auto done) { stream.async_handshake(ssl::stream_base::client, done); });
  if (ec) return absl::UnavailableError(absl::StrCat("TLS handshake with ", where, ": ", ec.message()));

  beast::http::request<beast::http::empty_body> request(beast::http::verb::get, target, 11);
  request.set(beast::http::field::host, where);
  request.set(beast::http::field::connection, "close");
  ec = http::RunFor(io, tcp, left(), [&](auto done) { beast::http::async_write(stream, request, done); });
  if (ec) return absl::UnavailableError(absl::StrCat("write to ", where, ": ", ec.message()));
  beast::flat_buffer buffer;
  beast::http::response_parser<beast::http::string_body> parser;
  parser.body_limit(kMaxBodyBytes);
  ec = http::RunFor(io, tcp, left(), [&](auto done) { beast::http::async_read(stream, buffer, parser, done); });
  if (ec) return absl::UnavailableError(absl::StrCat("read from ", where, ": ", ec.message()));
  const auto& response = parser.get();
  if (response.result_int() != 200) {
    return absl::UnavailableError(
        absl::StrCat("HTTP/1.1 ", response.result_int(), " ", std::string(response.reason()), " from ", where));
  }
  return response.body();
}

}  // namespace floe::internal
