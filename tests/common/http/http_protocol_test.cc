// HTTP/1.1 as RFC 9112 has it, on the wire: raw bytes to a real server on
// loopback, its answers split by a client parser independent of the server.
// Pipelined requests (also from a client that half-closes after them, as
// `printf ... | nc` does, and answered from another thread) come back in
// order; HTTP/1.0 gets Content-Length or a close-delimited stream, never
// chunks; HEAD gets no body; headers over their limit get 431 naming it,
// also when they trickle in, bodies 413 naming theirs; `Expect: 100-continue` gets `100 Continue` before
// the body is sent, and a declared body over the limit a 413 without it.
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/http/http_test_client.h"
#include "tests/common/http/server_fixture.h"

namespace floe::http {
namespace {

using floe::testing::ParseResponses;
using floe::testing::RawConnection;
using floe::testing::WireResponse;

constexpr char kHost[] = "Host: test\r\n";

// Reads until `n` final (non-1xx) responses are complete; the responses
// read so far, 1xx included.
std::vector<WireResponse> ReadResponses(RawConnection& c, size_t n, const std::vector<bool>& head = {}) {
  auto finals = [&](const std::string& bytes) {
    size_t count = 0;
    for (const WireResponse& r : ParseResponses(bytes, false, nullptr, nullptr, head)) count += r.status >= 200;
    return count >= n;
  };
  c.ReadUntil(finals);
  return ParseResponses(c.received(), c.closed(), nullptr, nullptr, head);
}

// Sends `bytes` on a new connection; the responses up to the server's close.
std::vector<WireResponse> RoundTrip(Server& server, const std::string& bytes, bool half_close = false,
                                    bool* closed = nullptr) {
  RawConnection c(server.address());
  EXPECT_TRUE(c.connected());
  EXPECT_TRUE(c.Send(bytes));
  if (half_close) shutdown(c.fd(), SHUT_WR);
  const bool was_closed = c.ReadToClose();
  if (closed != nullptr) *closed = was_closed;
  EXPECT_TRUE(was_closed) << "the server kept the connection open; received:\n" << c.received();
  std::string rest, error;
  auto responses = ParseResponses(c.received(), true, &rest, &error);
  EXPECT_EQ(error, "") << c.received();
  EXPECT_EQ(rest, "") << "bytes that are no response";
  return responses;
}

std::string Get(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\n" + kHost + extra + "\r\n";
}
std::string Post(const std::string& target, const std::string& body, const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\n" + kHost + "Content-Length: " + std::to_string(body.size()) + "\r\n" +
         extra + "\r\n" + body;
}

TEST(HttpProtocolTest, AnswersAGetAndAPipelinedPostInOrder) {
  Fixture f;
  // The POST is answered from another thread, after the GET's answer went
  // out; the second round half-closes after writing, as nc does.
  for (const bool half_close : {false, true}) {
    SCOPED_TRACE(half_close ? "half-closed after the requests" : "kept open");
    auto responses = RoundTrip(*f.server, Get("/echo?first") + Post("/later?second", "hello", "Connection: close\r\n"),
                               half_close);
    ASSERT_EQ(responses.size(), 2u);
    EXPECT_EQ(responses[0].status, 200);
    EXPECT_EQ(responses[0].body, "GET /echo?first ");
    EXPECT_EQ(responses[0].Header("connection"), "") << "the first answer keeps the connection";
    EXPECT_EQ(responses[1].status, 200);
    EXPECT_EQ(responses[1].body, "POST /later?second hello");
    EXPECT_EQ(responses[1].Header("connection"), "close");
  }
}

TEST(HttpProtocolTest, AnswersThreePipelinedRequestsInOrder) {
  Fixture f;
  const std::string chunked = "POST /echo?2 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  for (const bool half_close : {false, true}) {
    SCOPED_TRACE(half_close ? "half-closed after the requests" : "kept open");
    RawConnection c(f.server->address());
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send(Post("/later?1", "one") + chunked + Get("/later?3")));
    if (half_close) shutdown(c.fd(), SHUT_WR);
    auto responses = ReadResponses(c, 3);
    ASSERT_EQ(responses.size(), 3u) << c.received();
    EXPECT_EQ(responses[0].body, "POST /later?1 one");
    EXPECT_EQ(responses[1].body, "POST /echo?2 abcde");
    EXPECT_EQ(responses[2].body, "GET /later?3 ");
    // Kept open it stays usable; half-closed, the server closes after the last answer.
    if (half_close) {
      EXPECT_TRUE(c.ReadToClose());
    } else {
      ASSERT_TRUE(c.Send(Get("/echo?4")));
      auto more = ReadResponses(c, 4);
      ASSERT_EQ(more.size(), 4u);
      EXPECT_EQ(more[3].body, "GET /echo?4 ");
    }
  }
}

TEST(HttpProtocolTest, StreamsToHttp10WithoutChunksAndEndsWithTheClose) {
  Fixture f;
  bool closed = false;
  auto responses = RoundTrip(*f.server, "POST /stream HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", false, &closed);
  ASSERT_EQ(responses.size(), 1u);
  const WireResponse& r = responses[0];
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.chunked);
  EXPECT_EQ(r.Header("transfer-encoding"), "");
  EXPECT_FALSE(r.has_content_length);
  EXPECT_EQ(r.Header("connection"), "close");
  EXPECT_EQ(r.body.rfind("data: 0\n\n", 0), 0u) << r.body;
  EXPECT_NE(r.body.find("data: 99\n\n"), std::string::npos);
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
  EXPECT_TRUE(closed);
}

TEST(HttpProtocolTest, RepliesToHttp10WithContentLength) {
  Fixture f;
  auto responses = RoundTrip(*f.server, "GET /echo?a HTTP/1.0\r\n\r\n");
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].status, 200);
  EXPECT_TRUE(responses[0].has_content_length);
  EXPECT_FALSE(responses[0].chunked);
  EXPECT_EQ(responses[0].body, "GET /echo?a ");

  // An HTTP/1.0 keep-alive client is told the connection stays, and it does.
  RawConnection c(f.server->address());
  ASSERT_TRUE(c.Send("GET /echo?1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  auto first = ReadResponses(c, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].Header("connection"), "keep-alive");
  ASSERT_TRUE(c.Send("GET /gaps HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  EXPECT_TRUE(c.ReadToClose()) << "a stream to HTTP/1.0 ends with the connection";
  auto both = ParseResponses(c.received(), true);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].body, "ab");
  EXPECT_FALSE(both[1].chunked);
}

TEST(HttpProtocolTest, AnEmptySendDoesNotEndAChunkedStream) {
  Fixture f;
  RawConnection c(f.server->address());
  ASSERT_TRUE(c.Send(Get("/gaps") + Get("/echo?after")));
  auto responses = ReadResponses(c, 2);
  ASSERT_EQ(responses.size(), 2u) << c.received();
  EXPECT_TRUE(responses[0].chunked);
  EXPECT_EQ(responses[0].body, "ab");
  EXPECT_EQ(responses[1].body, "GET /echo?after ");
}

TEST(HttpProtocolTest, AnswersHeadWithoutABody) {
  Fixture f;
  RawConnection c(f.server->address());
  ASSERT_TRUE(c.Send("HEAD /echo HTTP/1.1\r\nHost: test\r\n\r\n" + Get("/echo?next")));
  auto responses = ReadResponses(c, 2, {true, false});
  ASSERT_EQ(responses.size(), 2u) << c.received();
  EXPECT_EQ(responses[0].Header("content-length"), std::to_string(std::string("HEAD /echo ").size()));
  EXPECT_EQ(responses[0].body, "");
  EXPECT_EQ(responses[1].body, "GET /echo?next ") << "the HEAD answer's body would show up here";
}

TEST(HttpProtocolTest, RefusesAHeaderFloodWith431NamingTheHeaderLimit) {
  ServerOptions options;
  options.max_header_bytes = 1024;
  Fixture f(options);
  for (const int fields : {1, 64}) {  // one huge field, or many small ones
    std::string flood;
    for (int i = 0; i < fields; ++i)
      flood += "X-Flood-" + std::to_string(i) + ": " + std::string(4096 / fields, 'h') + "\r\n";
    auto responses = RoundTrip(*f.server, Get("/echo", flood));
    ASSERT_EQ(responses.size(), 1u);
    EXPECT_EQ(responses[0].status, 431);
    EXPECT_NE(responses[0].body.find("the limit is 1024 header bytes"), std::string::npos) << responses[0].body;
  }
  auto ok = RoundTrip(*f.server, Get("/echo", "X-Small: " + std::string(500, 's') + "\r\nConnection: close\r\n"));
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].status, 200);
}

// Beast bounds each parse, not the header: a field is parsed (and kept) as
// soon as the first byte of the next one is in, so pieces that each end one
// byte into the next field once went past any limit. The sleeps only make
// the server read the pieces one by one; the answer is the same however
// the bytes arrive.
TEST(HttpProtocolTest, RefusesAHeaderThatTricklesInPastTheLimit) {
  ServerOptions options;
  options.max_header_bytes = 1024;
  Fixture f(options);
  RawConnection c(f.server->address());
  ASSERT_TRUE(c.Send("GET /echo HTTP/1.1\r\nX"));
  for (int i = 0; i < 64 && !c.closed(); ++i) {
    if (!c.Send("-Trickle-" + std::to_string(i) + ": " + std::string(40, 't') + "\r\nX")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  c.Send("-Last: 1\r\n\r\n");
  auto responses = ReadResponses(c, 1);
  ASSERT_EQ(responses.size(), 1u) << c.received();
  EXPECT_EQ(responses[0].status, 431);
  EXPECT_NE(responses[0].body.find("the limit is 1024 header bytes"), std::string::npos) << responses[0].body;
}

TEST(HttpProtocolTest, RefusesABodyOverTheLimitWith413NamingTheBodyLimit) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  Fixture f(options);
  const std::string big(4096, 'b');
  std::string chunked = "POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 8; ++i) chunked += "200\r\n" + std::string(512, 'c') + "\r\n";
  chunked += "0\r\n\r\n";
  for (const std::string& request : {Post("/echo", big), chunked}) {
    auto responses = RoundTrip(*f.server, request);
    ASSERT_EQ(responses.size(), 1u);
    EXPECT_EQ(responses[0].status, 413);
    EXPECT_NE(responses[0].body.find("the limit is 1024 body bytes"), std::string::npos) << responses[0].body;
  }
}

TEST(HttpProtocolTest, Sends100ContinueBeforeReadingTheBody) {
  Fixture f;
  RawConnection c(f.server->address());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  ASSERT_TRUE(c.ReadUntil([](const std::string& bytes) { return bytes.find("\r\n\r\n") != std::string::npos; }))
      << "no 100 Continue before the body";
  EXPECT_EQ(c.received(), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(c.Send("hello"));
  auto responses = ReadResponses(c, 1);
  ASSERT_EQ(responses.size(), 2u) << c.received();
  EXPECT_EQ(responses[0].status, 100);
  EXPECT_EQ(responses[1].status, 200);
  EXPECT_EQ(responses[1].body, "POST /echo hello");
}

TEST(HttpProtocolTest, RefusesADeclaredBodyOverTheLimitWithoutReadingIt) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  Fixture f(options);
  RawConnection c(f.server->address());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 1048576\r\nExpect: 100-continue\r\n\r\n"));
  // Answered at once, with no body sent and no 100 Continue first.
  auto responses = ReadResponses(c, 1);
  ASSERT_EQ(responses.size(), 1u) << c.received();
  EXPECT_EQ(responses[0].status, 413);
  EXPECT_NE(responses[0].body.find("the limit is 1024 body bytes"), std::string::npos) << responses[0].body;
  EXPECT_TRUE(c.ReadToClose());
}

TEST(HttpProtocolTest, AnswersAMalformedRequestWith400AndCloses) {
  Fixture f;
  auto responses = RoundTrip(*f.server, "GET /echo HTTP/1.1\r\nHost: test\r\nContent-Length: x\r\n\r\n");
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].status, 400);
  EXPECT_NE(responses[0].body.find("bad HTTP request"), std::string::npos) << responses[0].body;
}

}  // namespace
}  // namespace floe::http
