#include "common/http/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "absl/strings/str_cat.h"
#include "common/http/connection.h"
#include "common/http/connection_limits.h"
#include "common/log/log.h"

namespace floe::http {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using internal::ConnectionBase;
using internal::ServeConnection;
using internal::ServerState;

std::string_view Request::Header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name) return value;
  return {};
}

namespace {

// A failing accept (EMFILE, ENFILE, ENOBUFS...) is retried after this, doubling
// up to the maximum: the pending connection keeps the listener readable, so
// retrying at once would spin a core until a descriptor frees up.
constexpr std::chrono::milliseconds kMinAcceptBackoff{10};
constexpr std::chrono::milliseconds kMaxAcceptBackoff{1000};

// RLIMIT_NOFILE's soft limit now; -1 when unlimited or unreadable.
long DescriptorSoftLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<long>(limit.rlim_cur);
}

class ServerImpl final : public Server {
 public:
  ServerImpl(const ServerOptions& options, Handler handler)
      : fd_limit_(DescriptorSoftLimit()),
        state_(std::make_shared<ServerState>(
            options, std::move(handler),
            std::min(options.max_connections, ConnectionCapForFdLimit(fd_limit_, options.reserved_descriptors)))),
        acceptor_(io_),
        accept_timer_(io_) {}
  ~ServerImpl() override { Shutdown(); }

  absl::Status Listen() {
    if (!state_->options.tls_cert_file.empty()) {
      if (absl::Status s = LoadTls(); !s.ok()) return s;
    }
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(state_->options.host, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("http host ", state_->options.host, ": ", ec.message()));
    tcp::endpoint endpoint(address, static_cast<unsigned short>(state_->options.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return absl::UnavailableError(absl::StrCat("http listen on ", state_->options.host, ":", state_->options.port,
                                                 ": ", ec.message()));
    port_ = acceptor_.local_endpoint().port();
    if (effective_max_connections() < state_->options.max_connections)
      LogEvent(LogLevel::kInfo, "http", "connection_cap_lowered",
               {{"address", this->address()},
                {"max_connections", int64_t{state_->options.max_connections}},
                {"effective_max_connections", int64_t{effective_max_connections()}},
                {"descriptor_soft_limit", int64_t{fd_limit_}},
                {"reserved_descriptors", int64_t{state_->options.reserved_descriptors}}});
    Accept();
    for (int i = 0; i < std::max(1, state_->options.threads); ++i) threads_.emplace_back([this] { io_.run(); });
    return absl::OkStatus();
  }

  std::string address() const override { return absl::StrCat(state_->options.host, ":", port_); }
  int port() const override { return port_; }
  int connections() const override { return state_->limits.total(); }
  int effective_max_connections() const override { return state_->limits.max_total(); }

  void Shutdown() override {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (threads_.empty()) return;
    asio::post(io_, [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      accept_timer_.cancel();
    });
    io_.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    // Connections still in an exchange (a stream open at shutdown, a handler
    // that never answered) would otherwise never be freed.
    std::vector<std::shared_ptr<ConnectionBase>> live;
    {
      std::lock_guard<std::mutex> l(state_->live_mu);
      for (auto& weak : state_->live)
        if (auto c = weak.lock()) live.push_back(std::move(c));
      state_->live.clear();
    }
    for (auto& c : live) c->ReleaseForShutdown();
  }

 private:
  // One accept outstanding at a time: the handlers below never overlap.
  void Accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec && ec != asio::error::connection_aborted) return BackOff(ec);  // that one was the client's
      if (!ec) {
        Recovered();
        Admit(std::move(socket));
      }
      Accept();
    });
  }

  // Over either cap the connection is closed at once rather than queued.
  void Admit(tcp::socket socket) {
    boost::system::error_code ec;
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (ec) return;  // already gone
    std::string client = peer.address().to_string();
    if (!state_->limits.TryAdmit(client)) return;  // the socket closes here
    socket.set_option(tcp::no_delay(true), ec);
    Track(ServeConnection(std::move(socket), state_, std::move(client), tls_.get()));
  }

  // Accept failed for want of a resource (descriptors, buffers): retry after
  // a delay that doubles while it keeps failing. Logged once per episode.
  void BackOff(boost::system::error_code ec) {
    accept_backoff_ = accept_failures_ == 0 ? kMinAcceptBackoff : std::min(2 * accept_backoff_, kMaxAcceptBackoff);
    if (accept_failures_++ == 0) {
      accept_failing_since_ = std::chrono::steady_clock::now();
      LogEvent(LogLevel::kWarning, "http", "accept_failing",
               {{"address", address()},
                {"error", ec.message()},
                {"connections", int64_t{connections()}},
                {"retry", absl::StrCat("backing off from ", kMinAcceptBackoff.count(), " ms to ",
                                       kMaxAcceptBackoff.count(), " ms until accept succeeds")}});
    }
    accept_timer_.expires_after(accept_backoff_);
    accept_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || !acceptor_.is_open()) return;
      Accept();
    });
  }
  void Recovered() {
    if (accept_failures_ == 0) return;
    LogEvent(LogLevel::kInfo, "http", "accept_recovered",
             {{"address", address()},
              {"failed_accepts", accept_failures_},
              {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - accept_failing_since_)
                              .count()}});
    accept_failures_ = 0;
  }

  // Kept (weakly) for Shutdown, which frees the connections still in an exchange.
  void Track(const std::shared_ptr<ConnectionBase>& connection) {
    std::lock_guard<std::mutex> l(state_->live_mu);
    auto& live = state_->live;
    live.erase(std::remove_if(live.begin(), live.end(), [](const auto& w) { return w.expired(); }), live.end());
    live.push_back(connection);
  }

  // TLS 1.2 and later; with a client CA, a certificate it signed is required.
  absl::Status LoadTls() {
    const ServerOptions& o = state_->options;
    tls_ = std::make_unique<ssl::context>(ssl::context::tls_server);
    tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    boost::system::error_code ec;
    tls_->use_certificate_chain_file(o.tls_cert_file, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls-cert ", o.tls_cert_file, ": ", ec.message()));
    tls_->use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls-key ", o.tls_key_file, ": ", ec.message()));
    if (!o.tls_client_ca_file.empty()) {
      tls_->load_verify_file(o.tls_client_ca_file, ec);
      if (ec)
        return absl::InvalidArgumentError(absl::StrCat("--tls-client-ca ", o.tls_client_ca_file, ": ", ec.message()));
      tls_->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    return absl::OkStatus();
  }

  asio::io_context io_;
  std::unique_ptr<ssl::context> tls_;
  const long fd_limit_;  // RLIMIT_NOFILE's soft limit at Start; -1: none
  std::shared_ptr<ServerState> state_;
  tcp::acceptor acceptor_;
  // The accept backoff; touched only by the accept path (one at a time).
  asio::steady_timer accept_timer_;
  std::chrono::milliseconds accept_backoff_{0};
  int64_t accept_failures_ = 0;
  std::chrono::steady_clock::time_point accept_failing_since_;
  std::vector<std::thread> threads_;
  std::mutex shutdown_mu_;
  int port_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, Handler handler) {
  auto server = std::make_unique<ServerImpl>(options, std::move(handler));
  if (absl::Status s = server->Listen(); !s.ok()) return s;
  return server;
}

}  // namespace floe::http
