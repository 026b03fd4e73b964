#include "common/http/http_server.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace floe::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

std::string_view Request::Header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name) return value;
  return {};
}

namespace {

template <class Stream>
class Connection;

// One request's answer; forwards to its connection's strand.
template <class Stream>
class ExchangeImpl final : public Exchange {
 public:
  explicit ExchangeImpl(std::shared_ptr<Connection<Stream>> connection) : connection_(std::move(connection)) {}
  void Reply(Response response) override;
  void StartStream(int status, std::string content_type, Headers headers) override;
  void Send(std::string data, std::function<void(bool)> written) override;
  void End() override;
  void OnClientGone(std::function<void()> gone) override;

 private:
  std::shared_ptr<Connection<Stream>> connection_;
};

// What Shutdown needs of a connection, plain or TLS.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Once the I/O threads have stopped: drops the exchange (which holds its
  // connection: a cycle that only the exchange's end breaks) and the queued
  // writes, so that a connection still in an exchange is freed too.
  virtual void ReleaseForShutdown() = 0;
};

struct ServerState {
  ServerOptions options;
  Handler handler;
  std::atomic<int> connections{0};
  std::mutex live_mu;
  std::vector<std::weak_ptr<ConnectionBase>> live;  // guarded by live_mu; pruned on each accept
};

// A plain or a TLS connection (Stream is PlainStream or TlsStream).
template <class Stream>
class Connection : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  using std::enable_shared_from_this<Connection<Stream>>::shared_from_this;

 public:
  template <class... TlsContext>
  Connection(tcp::socket socket, std::shared_ptr<ServerState> state, TlsContext&... tls)
      : stream_(std::in_place, std::move(socket), tls...), state_(std::move(state)) {
    state_->connections.fetch_add(1);
  }
  ~Connection() override { state_->connections.fetch_sub(1); }

  void ReleaseForShutdown() override {
    std::lock_guard<std::recursive_mutex> lock(release_mu_);
    released_ = true;
    exchange_.reset();
    pending_.clear();
    on_gone_ = nullptr;
    stream_.reset();  // while the io_context is still there
  }

  // Runs fn on the connection's strand (an exchange's calls, from any
  // thread), or drops it once the server has shut down. Recursive: fn may
  // run inline and call back into the exchange.
  // False, fn dropped, once released.
  template <class Fn>
  bool Dispatch(Fn&& fn) {
    std::lock_guard<std::recursive_mutex> lock(release_mu_);
    if (released_) return false;
    asio::dispatch(stream_->get_executor(), std::forward<Fn>(fn));
    return true;
  }

  void Run() {
    asio::dispatch(stream_->get_executor(), [self = shared_from_this()] {
      if constexpr (kTls) {
        // The handshake gets the idle timeout: a client that connects and
        // never speaks TLS is dropped like one that never sends a request.
        self->lowest().expires_after(self->state_->options.idle_timeout);
        self->stream_->async_handshake(ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) return self->Drop();
          self->ReadRequest();
        });
      } else {
        self->ReadRequest();
      }
    });
  }

  // Exchange operations, on the strand.
  void Reply(Response r) {
    if (!InExchange() || streaming_) return;
    auto message = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(r.status), 11);
    message->set(bhttp::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) message->set(k, v);
    message->body() = std::move(r.body);
    message->keep_alive(keep_alive_);
    message->prepare_payload();
    exchange_ended_ = true;
    lowest().expires_after(state_->options.write_timeout);
    bhttp::async_write(*stream_, *message,
                       [self = shared_from_this(), message](beast::error_code ec, size_t) { self->ExchangeWritten(ec); });
  }
  void StartStream(int status, std::string content_type, Headers headers) {
    if (!InExchange() || streaming_) return;
    streaming_ = true;
    auto header = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(status), 11);
    header->set(bhttp::field::content_type, content_type);
    header->set(bhttp::field::cache_control, "no-cache");
    for (auto& [k, v] : headers) header->set(k, v);
    header->keep_alive(keep_alive_);
    header->chunked(true);
    auto serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*header);
    Queue([this, header, serializer](std::function<void(beast::error_code)> done) {
      bhttp::async_write_header(*stream_, *serializer,
                                [header, serializer, done](beast::error_code ec, size_t) { done(ec); });
    }, nullptr);
  }
  void Send(std::string data, std::function<void(bool)> written) {
    if (!InExchange() || !streaming_ || end_queued_) {
      if (written) written(false);
      return;
    }
    auto body = std::make_shared<std::string>(std::move(data));
    Queue([this, body](std::function<void(beast::error_code)> done) {
      asio::async_write(*stream_, bhttp::make_chunk(asio::buffer(*body)),
                        [body, done](beast::error_code ec, size_t) { done(ec); });
    }, std::move(written));
  }
  void End() {
    if (!InExchange() || !streaming_ || end_queued_) return;
    end_queued_ = true;
    Queue([this](std::function<void(beast::error_code)> done) {
      asio::async_write(*stream_, bhttp::make_chunk_last(), [done](beast::error_code ec, size_t) { done(ec); });
    }, [self = shared_from_this()](bool ok) {
      self->exchange_ended_ = true;
      self->ExchangeWritten(ok ? beast::error_code{} : beast::error_code(asio::error::broken_pipe));
    });
  }
  void OnClientGone(std::function<void()> gone) {
    if (!InExchange()) return;
    if (client_gone_) {
      gone();
      return;
    }
    on_gone_ = std::move(gone);
  }

 private:
  using Write = std::function<void(std::function<void(beast::error_code)>)>;
  // The TCP layer under TLS, or the stream itself: timeouts and the socket.
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(*stream_); }
  struct Pending {
    Write write;
    std::function<void(bool)> written;
  };

  bool InExchange() const { return exchange_ && !exchange_ended_ && !dropped_; }

  void ReadRequest() {
    exchange_.reset();
    exchange_ended_ = streaming_ = end_queued_ = client_gone_ = false;
    on_gone_ = nullptr;
    parser_.emplace();
    parser_->body_limit(state_->options.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(state_->options.max_header_bytes));
    lowest().expires_after(state_->options.idle_timeout);
    bhttp::async_read(*stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
  }

  void OnRequest(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || dropped_)
      return Drop();
    if (ec) {
      // Malformed or too large: answer once, then close.
      keep_alive_ = false;
      exchange_ = std::make_shared<ExchangeImpl<Stream>>(shared_from_this());
      Response r;
      const bool too_large = ec == bhttp::error::body_limit || ec == bhttp::error::header_limit;
      r.status = too_large ? 413 : 400;
      r.body = absl::StrCat(R"({"error":{"message":")", too_large ? "request too large: the limit is " : "bad HTTP request: ",
                            too_large ? absl::StrCat(state_->options.max_body_bytes, " body bytes") : ec.message(),
                            R"(","type":"invalid_request_error","param":null,"code":null}})");
      return Reply(std::move(r));
    }
    lowest().expires_never();  // the request's own deadline governs from here
    bhttp::request<bhttp::string_body> message = parser_->release();
    keep_alive_ = message.keep_alive();
    Request request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.path = request.target.substr(0, request.target.find('?'));
    for (const auto& field : message)
      request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())), std::string(field.value()));
    request.body = std::move(message.body());
    exchange_ = std::make_shared<ExchangeImpl<Stream>>(shared_from_this());
    WatchForHangUp(exchange_);
    state_->handler(std::move(request), exchange_);
  }

  // Notices a client that hangs up while its answer is pending, without
  // consuming anything it sent (a pipelined request stays buffered).
  void WatchForHangUp(const std::shared_ptr<Exchange>& exchange) {
    std::weak_ptr<Exchange> watched = exchange;
    lowest().socket().async_wait(tcp::socket::wait_read, asio::bind_executor(stream_->get_executor(),
        [self = shared_from_this(), watched](beast::error_code ec) {
          if (ec || watched.lock() != self->exchange_ || !self->InExchange()) return;
          char byte;
          beast::error_code peek_ec;
          self->lowest().socket().non_blocking(true);
          const size_t n = self->lowest().socket().receive(asio::buffer(&byte, 1), tcp::socket::message_peek, peek_ec);
          self->lowest().socket().non_blocking(false);
          if (peek_ec == asio::error::would_block) return self->WatchForHangUp(watched.lock());
          if (n == 0 || peek_ec) self->ClientGone();
          // Data: a pipelined request; stop watching, it is read after this exchange.
        }));
  }

  void ClientGone() {
    if (client_gone_) return;
    client_gone_ = true;
    keep_alive_ = false;
    if (auto gone = std::move(on_gone_)) gone();
  }

  void Queue(Write write, std::function<void(bool)> written) {
    pending_.push_back({std::move(write), std::move(written)});
    WriteNext();
  }
  // One write at a time; a `written` callback may queue the next one.
  void WriteNext() {
    if (writing_ || pending_.empty()) return;
    if (client_gone_ || dropped_) {
      // Fail everything queued, in order.
      auto pending = std::move(pending_);
      pending_.clear();
      for (auto& p : pending)
        if (p.written) p.written(false);
      return;
    }
    writing_ = true;
    lowest().expires_after(state_->options.write_timeout);
    pending_.front().write([self = shared_from_this()](beast::error_code ec) {
      // Between writes of a stream nothing may expire: only a write is timed.
      self->lowest().expires_never();
      self->writing_ = false;
      Pending done = std::move(self->pending_.front());
      self->pending_.pop_front();
      if (ec) self->ClientGone();
      if (done.written) done.written(!ec);
      self->WriteNext();
    });
  }

  // The exchange's last byte was written (or failed): read the next request or close.
  void ExchangeWritten(beast::error_code ec) {
    exchange_ended_ = true;
    if (ec || !keep_alive_ || client_gone_) return Drop();
    beast::error_code ignored;
    lowest().socket().cancel(ignored);  // the hang-up watch
    ReadRequest();
  }

  void Drop() {
    if (dropped_) return;
    dropped_ = true;
    if (exchange_ && !exchange_ended_) ClientGone();
    exchange_.reset();  // it holds this connection
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().socket().close(ignored);
  }

  // Reset by ReleaseForShutdown: its socket and timer belong to the
  // server's io_context, which a holder of the exchange may outlive.
  std::optional<Stream> stream_;
  std::shared_ptr<ServerState> state_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<Exchange> exchange_;
  std::deque<Pending> pending_;
  std::function<void()> on_gone_;
  bool keep_alive_ = true;
  bool writing_ = false;
  bool streaming_ = false;
  bool end_queued_ = false;
  bool exchange_ended_ = false;
  bool client_gone_ = false;
  bool dropped_ = false;
  std::recursive_mutex release_mu_;
  bool released_ = false;  // guarded by release_mu_
};

template <class Stream>
void ExchangeImpl<Stream>::Reply(Response response) {
  connection_->Dispatch([c = connection_, r = std::move(response)]() mutable { c->Reply(std::move(r)); });
}
template <class Stream>
void ExchangeImpl<Stream>::StartStream(int status, std::string content_type, Headers headers) {
  connection_->Dispatch([c = connection_, status, t = std::move(content_type), h = std::move(headers)]() mutable {
    c->StartStream(status, std::move(t), std::move(h));
  });
}
template <class Stream>
void ExchangeImpl<Stream>::Send(std::string data, std::function<void(bool)> written) {
  // The callback is kept out of the task until it is known to run: a server
  // that shut down still answers written(false).
  auto callback = std::make_shared<std::function<void(bool)>>(std::move(written));
  const bool queued = connection_->Dispatch([c = connection_, d = std::move(data), callback]() mutable {
    c->Send(std::move(d), std::move(*callback));
  });
  if (!queued && *callback) (*callback)(false);
}
template <class Stream>
void ExchangeImpl<Stream>::End() {
  connection_->Dispatch([c = connection_] { c->End(); });
}
template <class Stream>
void ExchangeImpl<Stream>::OnClientGone(std::function<void()> gone) {
  connection_->Dispatch([c = connection_, g = std::move(gone)]() mutable { c->OnClientGone(std::move(g)); });
}

class ServerImpl final : public Server {
 public:
  ServerImpl(const ServerOptions& options, Handler handler)
      : state_(std::make_shared<ServerState>()), acceptor_(io_) {
    state_->options = options;
    state_->handler = std::move(handler);
  }
  ~ServerImpl() override { Shutdown(); }

  absl::Status Listen() {
    if (!state_->options.tls_cert_file.empty()) {
      if (absl::Status s = LoadTls(); !s.ok()) return s;
    }
    beast::error_code ec;
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
    Accept();
    for (int i = 0; i < std::max(1, state_->options.threads); ++i) threads_.emplace_back([this] { io_.run(); });
    return absl::OkStatus();
  }

  std::string address() const override { return absl::StrCat(state_->options.host, ":", port_); }
  int port() const override { return port_; }
  int connections() const override { return state_->connections.load(); }

  void Shutdown() override {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (threads_.empty()) return;
    asio::post(io_, [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
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
  void Accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        if (state_->connections.load() >= state_->options.max_connections) {
          beast::error_code ignored;
          socket.close(ignored);  // over the bound: refuse rather than queue
        } else {
          socket.set_option(tcp::no_delay(true), ec);
          if (tls_) {
            Track(std::make_shared<Connection<TlsStream>>(std::move(socket), state_, *tls_))->Run();
          } else {
            Track(std::make_shared<Connection<PlainStream>>(std::move(socket), state_))->Run();
          }
        }
      }
      Accept();
    });
  }

  template <class C>
  std::shared_ptr<C> Track(std::shared_ptr<C> connection) {
    std::lock_guard<std::mutex> l(state_->live_mu);
    auto& live = state_->live;
    live.erase(std::remove_if(live.begin(), live.end(), [](const auto& w) { return w.expired(); }), live.end());
    live.push_back(connection);
    return connection;
  }

  // TLS 1.2 and later; with a client CA, a certificate it signed is required.
  absl::Status LoadTls() {
    const ServerOptions& o = state_->options;
    tls_ = std::make_unique<ssl::context>(ssl::context::tls_server);
    tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    beast::error_code ec;
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
  std::shared_ptr<ServerState> state_;
  tcp::acceptor acceptor_;
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
