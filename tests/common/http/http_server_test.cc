// The HTTP server against an independent blocking client on loopback:
// replies, streams paced by their writes, hang-ups noticed while nothing is
// written, a stalled reader dropped after the write timeout while others are
// served, and the body and connection bounds.
#include "common/http/http_server.h"
#include "common/http/client.h"

#include <sys/socket.h>

#include <atomic>
#include <future>
#include <thread>

#include <boost/asio.hpp>

#include "gtest/gtest.h"
#include "tests/common/http/http_test_client.h"

namespace floe::http {
namespace {

using floe::testing::HttpRequest;
using floe::testing::SseStream;

struct Fixture {
  std::atomic<int> gone{0};
  std::atomic<int> stall_failed_writes{0};
  std::atomic<int> stall_sent{0};
  std::promise<void> stall_done;
  std::unique_ptr<Server> server;

  explicit Fixture(ServerOptions options = {}) {
    auto started = Server::Start(options, [this](Request request, std::shared_ptr<Exchange> exchange) {
      Handle(std::move(request), std::move(exchange));
    });
    EXPECT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
  }

  // Streams `n` events, each written before the next is queued.
  static void StreamEvents(std::shared_ptr<Exchange> exchange, int i, int n) {
    if (i == n) {
      exchange->Send("data: [DONE]\n\n", nullptr);
      return exchange->End();
    }
    exchange->Send("data: " + std::to_string(i) + "\n\n", [exchange, i, n](bool ok) {
      if (ok) StreamEvents(exchange, i + 1, n);
    });
  }

  void Stall(std::shared_ptr<Exchange> exchange) {
    exchange->Send(std::string(256 << 10, 'x'), [this, exchange](bool ok) {
      if (!ok) {
        stall_failed_writes++;
        stall_done.set_value();
        return;
      }
      if (++stall_sent < 4096) Stall(exchange);
    });
  }

  void Handle(Request request, std::shared_ptr<Exchange> exchange) {
    if (request.path == "/echo") {
      Response r;
      r.content_type = "text/plain";
      r.body = request.method + " " + request.target + " " + request.body;
      r.headers.emplace_back("X-Seen", std::string(request.Header("x-test")));
      return exchange->Reply(std::move(r));
    }
    if (request.path == "/stream") {
      exchange->StartStream(200, "text/event-stream");
      return StreamEvents(exchange, 0, 100);
    }
    if (request.path == "/wait") {
      // Answered never: only the hang-up ends it.
      return exchange->OnClientGone([this, exchange] { gone++; });
    }
    if (request.path == "/stall") {
      exchange->StartStream(200, "text/event-stream");
      return Stall(exchange);
    }
    exchange->Reply(Response{404, "text/plain", "no", {}});
  }
};

TEST(SseParserTest, SplitsEventsAcrossChunks) {
  SseParser parser;
  std::string data;
  parser.Feed("data: {\"a\":");
  EXPECT_FALSE(parser.Next(&data));
  parser.Feed(" 1}\n\nevent: ping\n\ndata: \n\ndata: [DONE]\n");
  ASSERT_TRUE(parser.Next(&data));
  EXPECT_EQ(data, "{\"a\": 1}");
  ASSERT_TRUE(parser.Next(&data));  // the non-data event is skipped
  EXPECT_EQ(data, "");
  EXPECT_FALSE(parser.Next(&data)) << "an event is complete only at its blank line";
  parser.Feed("\n");
  ASSERT_TRUE(parser.Next(&data));
  EXPECT_EQ(data, "[DONE]");
}

TEST(HttpServerTest, RepliesWithHeadersAndBody) {
  Fixture f;
  auto r = HttpRequest(f.server->address(), "POST", "/echo?x=1", "hello", {{"X-Test", "yes"}});
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "POST /echo?x=1 hello");
  EXPECT_EQ(r.Header("x-seen"), "yes");
  EXPECT_EQ(HttpRequest(f.server->address(), "GET", "/other").status, 404);
}

TEST(HttpServerTest, StreamsEventsInOrder) {
  Fixture f;
  SseStream stream(f.server->address(), "/stream", "{}");
  ASSERT_EQ(stream.status(), 200);
  std::string data;
  int next = 0;
  while (stream.Next(&data) && data != "[DONE]") {
    EXPECT_EQ(data, std::to_string(next));
    ++next;
  }
  EXPECT_EQ(next, 100);
  EXPECT_EQ(data, "[DONE]");
}

TEST(HttpServerTest, NoticesAHangUpWhileNothingIsWritten) {
  Fixture f;
  for (int i = 0; i < 3; ++i) {
    SseStream stream(f.server->address(), "/wait", "{}", 0, 300);
    stream.Close();
  }
  for (int waited = 0; waited < 3000 && f.gone.load() < 3; waited += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(f.gone.load(), 3);
}

TEST(HttpServerTest, DropsAStalledReaderAndServesOthers) {
  ServerOptions options;
  options.write_timeout = std::chrono::seconds(1);
  Fixture f(options);
  SseStream stalled(f.server->address(), "/stall", "{}", /*receive_buffer_bytes=*/4096);
  ASSERT_EQ(stalled.status(), 200);
  // Never read: the server's write blocks, and others still get answers.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(HttpRequest(f.server->address(), "POST", "/echo", "x").status, 200);
  ASSERT_EQ(f.stall_done.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the stalled write never timed out";
  EXPECT_EQ(f.stall_failed_writes.load(), 1);
  EXPECT_LT(f.stall_sent.load(), 4096);
}

TEST(HttpServerTest, RefusesBodiesOverTheLimit) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  Fixture f(options);
  auto r = HttpRequest(f.server->address(), "POST", "/echo", std::string(4096, 'b'));
  EXPECT_EQ(r.status, 413) << r.error;
  EXPECT_NE(r.body.find("1024"), std::string::npos) << r.body;
  EXPECT_EQ(HttpRequest(f.server->address(), "POST", "/echo", std::string(1000, 'b')).status, 200);
}

TEST(HttpServerTest, BoundsConnections) {
  ServerOptions options;
  options.max_connections = 2;
  Fixture f(options);
  boost::asio::io_context io;
  const auto endpoint = boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                       static_cast<unsigned short>(f.server->port()));
  std::vector<std::unique_ptr<boost::asio::ip::tcp::socket>> idle;
  for (int i = 0; i < 2; ++i) {
    idle.push_back(std::make_unique<boost::asio::ip::tcp::socket>(io));
    idle.back()->connect(endpoint);
  }
  for (int waited = 0; waited < 2000 && f.server->connections() < 2; waited += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(f.server->connections(), 2);
  // The third is closed at once rather than queued.
  EXPECT_EQ(HttpRequest(f.server->address(), "GET", "/echo", "", {}, 2000).status, 0);
  idle.clear();
  for (int waited = 0; waited < 2000 && f.server->connections() > 0; waited += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(HttpRequest(f.server->address(), "GET", "/echo").status, 200);
}

TEST(HttpServerTest, ShutdownWithOpenStreamsReturns) {
  Fixture f;
  SseStream waiting(f.server->address(), "/wait", "{}", 0, 2000);
  const auto start = std::chrono::steady_clock::now();
  f.server->Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// A handler may hold its exchange past the server (the router's gRPC call
// does until its worker answers): after the server is gone, the exchange's
// calls do nothing, a write reports failure, and dropping it frees the
// connection without touching the server's destroyed I/O context (the
// sanitizer build catches that use after free).
TEST(HttpServerTest, AnExchangeHeldPastTheServerIsInert) {
  std::promise<std::shared_ptr<Exchange>> held;
  auto started = Server::Start({}, [&held](Request, std::shared_ptr<Exchange> exchange) {
    exchange->StartStream(200, "text/event-stream");
    held.set_value(std::move(exchange));
  });
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<Server> server = *std::move(started);
  SseStream waiting(server->address(), "/held", "{}", 0, 2000);
  std::shared_ptr<Exchange> exchange = held.get_future().get();
  server.reset();  // Shutdown, then the I/O context goes
  std::promise<bool> written;
  exchange->Send("data: late\n\n", [&written](bool ok) { written.set_value(ok); });
  auto result = written.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(result.get());
  exchange->End();
  exchange->Reply(Response{200, "text/plain", "late", {}});
  exchange->OnClientGone([] {});
  exchange.reset();  // the last reference to the connection
}

}  // namespace
}  // namespace floe::http
