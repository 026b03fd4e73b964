// The HTTP server against an independent blocking client on loopback:
// replies, streams paced by their writes, hang-ups noticed while nothing is
// written, a stalled reader dropped after the write timeout while others are
// served, the body and connection bounds (in all, per client address, and
// sized from the descriptor limit), and an accept that fails for want of
// descriptors retried without spinning (in a child process whose limit is
// lowered). The protocol itself is http_protocol_test's.
#include "common/http/http_server.h"
#include "common/http/client.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include <boost/asio.hpp>

#include "gtest/gtest.h"
#include "tests/common/http/http_test_client.h"
#include "tests/common/http/server_fixture.h"

namespace floe::http {
namespace {

using floe::testing::HttpRequest;
using floe::testing::ParseResponses;
using floe::testing::RawConnection;
using floe::testing::SseStream;

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  for (const auto deadline = std::chrono::steady_clock::now() + timeout; !condition();) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A GET /echo from `source_ip` on a connection of its own: the status, or 0
// when the server closed without answering.
int EchoFrom(Server& server, const std::string& source_ip) {
  RawConnection c(server.address(), source_ip);
  if (!c.connected() || !c.Send("GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")) return 0;
  c.ReadToClose();
  auto responses = ParseResponses(c.received(), true);
  return responses.empty() ? 0 : responses[0].status;
}

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

TEST(HttpServerTest, CapsConnectionsPerClientAddress) {
  ServerOptions options;
  options.max_connections_per_client = 3;
  Fixture f(options);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawConnection>(f.server->address(), "127.0.0.1"));
    ASSERT_TRUE(held.back()->connected());
  }
  ASSERT_TRUE(WaitFor([&] { return f.server->connections() == 3; }));
  // The fourth from 127.0.0.1 is closed unanswered; another address is served.
  RawConnection over(f.server->address(), "127.0.0.1");
  ASSERT_TRUE(over.connected());
  over.Send("GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_TRUE(over.ReadToClose()) << "the connection over the cap was kept";
  EXPECT_EQ(over.received(), "");
  EXPECT_EQ(EchoFrom(*f.server, "127.0.0.2"), 200);
  EXPECT_EQ(EchoFrom(*f.server, "127.0.0.1"), 0);
  // A connection freed is one more for that client.
  held.pop_back();
  ASSERT_TRUE(WaitFor([&] { return f.server->connections() == 2; }));
  EXPECT_EQ(EchoFrom(*f.server, "127.0.0.1"), 200);
}

// Lowers RLIMIT_NOFILE's soft limit for one scope (reversible: soft <= hard).
class SoftFdLimit {
 public:
  explicit SoftFdLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(soft, saved_.rlim_max);
    ok_ = setrlimit(RLIMIT_NOFILE, &lowered) == 0;
  }
  ~SoftFdLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

TEST(HttpServerTest, SizesTheConnectionCapBelowTheDescriptorLimit) {
  SoftFdLimit limit(300);
  ASSERT_TRUE(limit.ok());
  ServerOptions options;
  options.reserved_descriptors = 100;
  Fixture lowered(options);
  EXPECT_EQ(lowered.server->effective_max_connections(), 200);
  options.max_connections = 50;
  Fixture configured(options);
  EXPECT_EQ(configured.server->effective_max_connections(), 50) << "the configured cap is lower still";
}

// In a child whose descriptors are all taken: a client connects, the server's
// accept fails (EMFILE) while the child's CPU time is measured, then the
// descriptors are freed and the waiting client must be served. "" or what
// went wrong.
std::string ServeThroughDescriptorExhaustion() {
  SoftFdLimit limit(128);
  if (!limit.ok()) return "cannot lower RLIMIT_NOFILE";
  ServerOptions options;
  options.reserved_descriptors = 0;
  auto server = Server::Start(options, [](Request request, std::shared_ptr<Exchange> exchange) {
    exchange->Reply(Response{200, "text/plain", EchoOf(request), {}});
  });
  if (!server.ok()) return "start: " + server.status().ToString();
  std::vector<int> filler;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  if (errno != EMFILE) return "filling descriptors stopped with " + std::string(strerror(errno));
  close(filler.back());  // one for the client's socket; none left for accept
  filler.pop_back();
  RawConnection client((*server)->address());
  if (!client.connected()) return "the client could not connect";
  if (!client.Send("GET /echo?after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")) return "send failed";
  // A spinning accept loop burns a core or more; a backoff almost nothing.
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  getrusage(RUSAGE_SELF, &after);
  auto seconds = [](const rusage& u) {
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  const double cpu = seconds(after) - seconds(before);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string error;
  if (cpu > 0.5 * wall)
    error = "CPU " + std::to_string(cpu) + " s in " + std::to_string(wall) + " s while accept failed; ";
  if (client.ReadUntil([](const std::string& bytes) { return !bytes.empty(); }, 100))
    error += "answered while no descriptor was free (the test did not exhaust them); ";
  for (int fd : filler) close(fd);
  client.ReadToClose(10000);
  auto responses = ParseResponses(client.received(), true);
  if (responses.size() != 1 || responses[0].status != 200 || responses[0].body != "GET /echo?after ")
    error += "not served once descriptors were free: \"" + client.received() + "\"";
  return error;
}

TEST(HttpServerTest, BacksOffInsteadOfSpinningWhileDescriptorsAreExhausted) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t child = fork();  // no other thread runs here: the child is safe to use
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    const std::string error = ServeThroughDescriptorExhaustion();
    if (!error.empty() && write(report[1], error.data(), error.size()) < 0) _exit(3);
    _exit(error.empty() ? 0 : 1);
  }
  close(report[1]);
  std::string error;
  pollfd p{report[0], POLLIN, 0};
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);;) {
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    char chunk[512];
    if (left <= 0 || poll(&p, 1, left) <= 0) {
      kill(child, SIGKILL);
      error = "the child did not finish within 60 s";
      break;
    }
    const ssize_t n = read(report[0], chunk, sizeof chunk);
    if (n <= 0) break;
    error.append(chunk, static_cast<size_t>(n));
  }
  close(report[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace floe::http
