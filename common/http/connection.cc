#include "common/http/connection.h"

#include <algorithm>
#include <array>
#include <deque>
#include <optional>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace floe::http::internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// The interim answer to `Expect: 100-continue`.
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// After an answer that ends the connection, what the client still sends (a
// refused body, requests pipelined behind a `Connection: close`) is read and
// dropped, for at most this long and this many bytes, before the close:
// closing with unread bytes makes the kernel send a reset, which can destroy
// the answer before the client reads it.
constexpr std::chrono::seconds kLingerTime{2};
constexpr size_t kLingerBytes = 1 << 20;

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

// Bytes read from a client at a time; the read buffer holds at most a
// header's worth more (beyond that, a chunk header or trailer is refused).
constexpr size_t kReadBytes = 64 << 10;

// A plain or a TLS connection (Stream is PlainStream or TlsStream).
template <class Stream>
class Connection : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  using std::enable_shared_from_this<Connection<Stream>>::shared_from_this;

 public:
  // `client` was admitted by state->limits; released when this is destroyed.
  template <class... TlsContext>
  Connection(tcp::socket socket, std::shared_ptr<ServerState> state, std::string client, TlsContext&... tls)
      : stream_(std::in_place, std::move(socket), tls...),
        state_(std::move(state)),
        client_(std::move(client)),
        buffer_(state_->options.max_header_bytes + kReadBytes) {}
  ~Connection() override { state_->limits.Release(client_); }

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
    // 1xx, 204 and 304 have no body (prepare_payload throws on one).
    if (r.status / 100 != 1 && r.status != 204 && r.status != 304) message->body() = std::move(r.body);
    SetConnection(*message);
    message->prepare_payload();
    exchange_ended_ = true;
    lowest().expires_after(state_->options.write_timeout);
    auto written = [self = shared_from_this(), message](beast::error_code ec, size_t) { self->ExchangeWritten(ec); };
    if (head_) {
      // Content-Length says what a GET would get; no body follows.
      auto serializer = std::make_shared<bhttp::response_serializer<bhttp::string_body>>(*message);
      bhttp::async_write_header(*stream_, *serializer,
                                [serializer, written](beast::error_code ec, size_t n) { written(ec, n); });
    } else {
      bhttp::async_write(*stream_, *message, std::move(written));
    }
  }
  void StartStream(int status, std::string content_type, Headers headers) {
    if (!InExchange() || streaming_) return;
    streaming_ = true;
    // HTTP/1.0 has no chunks (RFC 9112 forbids sending them): the body ends
    // where the connection does.
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;
    auto header = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(status), 11);
    header->set(bhttp::field::content_type, content_type);
    header->set(bhttp::field::cache_control, "no-cache");
    for (auto& [k, v] : headers) header->set(k, v);
    SetConnection(*header);
    if (chunked_) header->chunked(true);
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
      // Nothing to write for HEAD, nor for empty data: as a chunk it would
      // be the last one.
      if (head_ || body->empty()) return Completed(std::move(done));
      auto sent = [body, done](beast::error_code ec, size_t) { done(ec); };
      if (chunked_) {
        asio::async_write(*stream_, bhttp::make_chunk(asio::buffer(*body)), std::move(sent));
      } else {
        asio::async_write(*stream_, asio::buffer(*body), std::move(sent));
      }
    }, std::move(written));
  }
  void End() {
    if (!InExchange() || !streaming_ || end_queued_) return;
    end_queued_ = true;
    Queue([this](std::function<void(beast::error_code)> done) {
      if (!chunked_ || head_) return Completed(std::move(done));  // the close ends it
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

  // A write that has nothing to send completes like one that did.
  void Completed(std::function<void(beast::error_code)> done) {
    asio::post(stream_->get_executor(), [done = std::move(done)] { done({}); });
  }

  // The Connection header: HTTP/1.1 answers always (RFC 9110 2.5), so a
  // kept-alive HTTP/1.0 client is told so explicitly.
  template <class Message>
  void SetConnection(Message& message) {
    message.keep_alive(keep_alive_);
    if (keep_alive_ && version_ < 11) message.set(bhttp::field::connection, "keep-alive");
  }

  // The socket errors and ends that mean the client is gone: nothing to answer.
  bool HungUp(beast::error_code ec) const {
    if (dropped_) return true;
    if (!ec) return false;
    static const auto& http_errors = bhttp::make_error_code(bhttp::error::need_more).category();
    return ec == bhttp::error::end_of_stream || ec.category() != http_errors;
  }

  void ReadRequest() {
    exchange_.reset();
    exchange_ended_ = streaming_ = chunked_ = head_ = end_queued_ = client_gone_ = false;
    on_gone_ = nullptr;
    header_scanned_ = 0;
    header_end_seen_ = false;
    lowest().expires_after(state_->options.idle_timeout);  // for the whole header
    ParseHeader();
  }

  // The header goes to a fresh parser in one piece, once a header's end
  // ("\r\n\r\n") is in or max_header_bytes are. Beast bounds the bytes one
  // parse looks at, not the header: fields that trickled in a few bytes at a
  // time were parsed (and kept) past any limit. And a parser that saw part
  // of a header judges the rest by how it was split (it skips ahead to a
  // later "\r\n\r\n"): 431, 400 or a wait for the same bytes. Parsed whole
  // from the request's first byte, the same bytes get the same answer
  // however they arrive.
  void ParseHeader() {
    const size_t budget = state_->options.max_header_bytes;
    const size_t window = std::min(buffer_.size(), budget);
    const char* data = static_cast<const char*>(buffer_.data().data());
    if (window < budget && !HeaderEndIn(data, window)) return ReadHeaderBytes();
    parser_.emplace();
    parser_->body_limit(state_->options.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(budget));
    beast::error_code ec;
    size_t fed = 0;
    while (!parser_->is_header_done() && fed < window) {
      const size_t used = parser_->put(asio::buffer(data + fed, window - fed), ec);
      fed += used;
      if (ec == bhttp::error::need_more) {
        ec = {};
        if (used == 0) break;
        continue;
      }
      if (ec) return OnHeader(ec);
    }
    if (parser_->is_header_done()) {
      buffer_.consume(fed);
      return OnHeader({});
    }
    // Offered every byte up to the limit, the parser still wants more.
    if (window == budget) return OnHeader(bhttp::error::header_limit);
    ReadHeaderBytes();  // the "\r\n\r\n" was inside a start line still too short to judge
  }
  // Whether data[0, size) holds a "\r\n\r\n"; scans only what is new.
  bool HeaderEndIn(const char* data, size_t size) {
    if (!header_end_seen_) {
      const size_t from = header_scanned_ >= 3 ? header_scanned_ - 3 : 0;
      header_end_seen_ = std::string_view(data, size).find("\r\n\r\n", from) != std::string_view::npos;
      header_scanned_ = size;
    }
    return header_end_seen_;
  }
  void ReadHeaderBytes() {
    stream_->async_read_some(buffer_.prepare(kReadBytes), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->buffer_.commit(n);
      if (ec == asio::error::eof) {
        // As in Beast's own read: a close between requests ends the
        // connection, one inside a request is a partial message.
        if (self->buffer_.size() == 0) return self->OnHeader(bhttp::error::end_of_stream);
        return self->OnHeader(bhttp::error::partial_message);
      }
      if (ec) return self->OnHeader(ec);
      self->ParseHeader();
    });
  }

  // The header is in (a declared Content-Length over the limit is already an
  // error): ask for the body if the client waits to be asked, then read it.
  void OnHeader(beast::error_code ec) {
    if (HungUp(ec)) return Drop();
    if (ec) return Refuse(ec);
    if (parser_->is_done()) return OnRequest({});
    const auto& header = parser_->get();
    if (header.version() >= 11 && beast::iequals(header[bhttp::field::expect], "100-continue")) {
      lowest().expires_after(state_->options.write_timeout);
      asio::async_write(*stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](beast::error_code ec, size_t) {
                          if (ec) return self->Drop();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    lowest().expires_after(state_->options.idle_timeout);
    bhttp::async_read(*stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
  }

  // Malformed or too large: answer once, naming the limit, then close.
  void Refuse(beast::error_code ec) {
    keep_alive_ = false;
    head_ = false;
    exchange_ = std::make_shared<ExchangeImpl<Stream>>(shared_from_this());
    Response r;
    std::string message;
    if (ec == bhttp::error::header_limit) {
      r.status = 431;
      message = absl::StrCat("request header fields too large: the limit is ", state_->options.max_header_bytes,
                             " header bytes");
    } else if (ec == bhttp::error::body_limit) {
      r.status = 413;
      message = absl::StrCat("request body too large: the limit is ", state_->options.max_body_bytes, " body bytes");
    } else if (ec == bhttp::error::buffer_overflow) {
      r.status = 400;
      message = absl::StrCat("bad HTTP request: a chunk header or trailer over ", kReadBytes, " bytes");
    } else {
      r.status = 400;
      message = absl::StrCat("bad HTTP request: ", ec.message());
    }
    r.body = absl::StrCat(R"({"error":{"message":")", message,
                          R"(","type":"invalid_request_error","param":null,"code":null}})");
    Reply(std::move(r));
  }

  void OnRequest(beast::error_code ec) {
    if (HungUp(ec)) return Drop();
    if (ec) return Refuse(ec);
    lowest().expires_never();  // the request's own deadline governs from here
    bhttp::request<bhttp::string_body> message = parser_->release();
    version_ = message.version();
    keep_alive_ = message.keep_alive();
    head_ = message.method() == bhttp::verb::head;
    if (buffer_.size() > 0) pipelined_ = true;
    Request request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.path = request.target.substr(0, request.target.find('?'));
    for (const auto& field : message)
      request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())), std::string(field.value()));
    request.body = std::move(message.body());
    exchange_ = std::make_shared<ExchangeImpl<Stream>>(shared_from_this());
    if (!peer_half_closed_) WatchForHangUp(exchange_);
    state_->handler(std::move(request), exchange_);
  }

  enum class Peer { kQuiet, kSentMore, kClosed };
  // What the client did since its last request, read without consuming it.
  Peer PeekPeer() {
    char byte;
    beast::error_code ec;
    auto& socket = lowest().socket();
    socket.non_blocking(true);
    const size_t n = socket.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, ec);
    socket.non_blocking(false);
    if (ec == asio::error::would_block) return Peer::kQuiet;
    return n == 0 || ec ? Peer::kClosed : Peer::kSentMore;
  }

  // Notices a client that hangs up while its answer is pending, without
  // consuming anything it sent (a pipelined request stays buffered). A
  // client that pipelines and then closes its side (`printf ... | nc`)
  // is waiting for its answers, not gone: its FIN ends the requests, and a
  // real hang-up shows when a write fails. One that sends a request at a
  // time and closes while it waits has given up on the answer.
  void WatchForHangUp(const std::shared_ptr<Exchange>& exchange) {
    std::weak_ptr<Exchange> watched = exchange;
    lowest().socket().async_wait(tcp::socket::wait_read, asio::bind_executor(stream_->get_executor(),
        [self = shared_from_this(), watched](beast::error_code ec) {
          if (ec || watched.lock() != self->exchange_ || !self->InExchange()) return;
          switch (self->PeekPeer()) {
            case Peer::kQuiet:
              return self->WatchForHangUp(watched.lock());
            case Peer::kSentMore:  // a pipelined request: read after this exchange
              self->pipelined_ = true;
              return;
            case Peer::kClosed:
              if (self->pipelined_) {
                self->peer_half_closed_ = true;
                return;
              }
              return self->ClientGone();
          }
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
    if (ec || client_gone_) return Drop();
    if (!keep_alive_) return CloseGracefully();
    beast::error_code ignored;
    lowest().socket().cancel(ignored);  // the hang-up watch
    ReadRequest();
  }

  // Ends the connection after its last answer: FIN first, then what the
  // client still sends is drained (bounded by kLingerTime and kLingerBytes)
  // so that the close sends no reset ahead of the answer.
  void CloseGracefully() {
    exchange_.reset();  // it holds this connection
    beast::error_code ignored;
    lowest().socket().cancel(ignored);  // the hang-up watch
    lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    lowest().expires_after(std::min<std::chrono::steady_clock::duration>(kLingerTime, state_->options.idle_timeout));
    Drain(kLingerBytes);
  }
  void Drain(size_t left) {
    if (!drain_) drain_ = std::make_unique<std::array<char, 4096>>();
    lowest().async_read_some(asio::buffer(*drain_), [self = shared_from_this(), left](beast::error_code ec, size_t n) {
      if (ec || n >= left) return self->Drop();
      self->Drain(left - n);
    });
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
  const std::string client_;  // the client's address, as state_->limits counts it
  beast::flat_buffer buffer_;  // bounded: a header and one read more
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  size_t header_scanned_ = 0;     // bytes of buffer_ searched for a header's end
  bool header_end_seen_ = false;  // one is in buffer_
  std::shared_ptr<Exchange> exchange_;
  std::deque<Pending> pending_;
  std::function<void()> on_gone_;
  std::unique_ptr<std::array<char, 4096>> drain_;  // what a lingering close discards
  unsigned version_ = 11;  // the current request's HTTP version (10 or 11)
  bool keep_alive_ = true;
  bool head_ = false;      // the current request is a HEAD: answers carry no body
  bool writing_ = false;
  bool streaming_ = false;
  bool chunked_ = false;   // the stream is framed in chunks (HTTP/1.1)
  bool end_queued_ = false;
  bool exchange_ended_ = false;
  bool client_gone_ = false;
  bool pipelined_ = false;         // the client sent a request before its previous answer
  bool peer_half_closed_ = false;  // it then closed its side: answer what it sent, then close
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

}  // namespace

std::shared_ptr<ConnectionBase> ServeConnection(tcp::socket socket, std::shared_ptr<ServerState> state,
                                                std::string client, ssl::context* tls) {
  if (tls != nullptr) {
    auto connection =
        std::make_shared<Connection<TlsStream>>(std::move(socket), std::move(state), std::move(client), *tls);
    connection->Run();
    return connection;
  }
  auto connection = std::make_shared<Connection<PlainStream>>(std::move(socket), std::move(state), std::move(client));
  connection->Run();
  return connection;
}

}  // namespace floe::http::internal
