// Fault: hostile HTTP/1.x at a live router (issue 41, items 5 and 6), on raw
// sockets, one worker, the router's HTTP API and /metrics on loopback.
// What a client is promised:
// - a GET /v1/models and a POST /v1/completions pipelined in one write are
//   both answered, in order, also when the client half-closes right after
//   them (`printf ... | nc`); the POST once went unanswered;
// - an HTTP/1.0 client gets a Content-Length answer, and a streamed
//   completion without chunking that ends where the connection closes;
// - a header block over the limit gets 431 naming the header limit, and
//   `Expect: 100-continue` gets `100 Continue` before the body is sent;
// - 300 connections to /metrics held from 127.0.0.1 (more than the endpoint
//   admits in all) starve no scraper at another address: 30 scrapes from
//   127.0.0.2 all succeed, and the router still serves afterwards.
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "tests/common/http/http_test_client.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

using nlohmann::json;

constexpr int kTimeoutMs = 30000;

std::string Completion(bool stream, const std::string& version, const std::string& extra = "") {
  const std::string body =
      json{{"prompt", "Hello"}, {"max_tokens", 4}, {"ignore_eos", true}, {"temperature", 0}, {"stream", stream}}
          .dump();
  return "POST /v1/completions HTTP/" + version + "\r\nHost: floe\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

// Sends `bytes` on a new connection (half-closing after them if asked) and
// splits what comes back until the router closes.
std::vector<WireResponse> RoundTrip(const std::string& address, const std::string& bytes, bool half_close = false) {
  RawConnection c(address);
  EXPECT_TRUE(c.connected()) << address;
  EXPECT_TRUE(c.Send(bytes));
  if (half_close) shutdown(c.fd(), SHUT_WR);
  EXPECT_TRUE(c.ReadToClose(kTimeoutMs)) << "the router kept the connection; received:\n" << c.received();
  std::string error;
  auto responses = ParseResponses(c.received(), true, nullptr, &error);
  EXPECT_EQ(error, "") << c.received();
  return responses;
}

class HttpEdgesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster(1, {}, {"--http-port", "0"});
    ASSERT_TRUE(cluster_->ok());
    http_ = new std::string(HttpBoundAddress(cluster_->router().lines()));
    ASSERT_FALSE(http_->empty()) << "the router printed no 'http bound to' line";
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete http_;
  }
  static LocalCluster* cluster_;
  static std::string* http_;
};
LocalCluster* HttpEdgesTest::cluster_ = nullptr;
std::string* HttpEdgesTest::http_ = nullptr;

TEST_F(HttpEdgesTest, AnswersAPipelinedGetAndPostInOrder) {
  for (const bool half_close : {false, true}) {
    SCOPED_TRACE(half_close ? "half-closed after the requests" : "kept open");
    auto responses = RoundTrip(
        *http_, "GET /v1/models HTTP/1.1\r\nHost: floe\r\n\r\n" + Completion(false, "1.1", "Connection: close\r\n"),
        half_close);
    ASSERT_EQ(responses.size(), 2u);
    ASSERT_EQ(responses[0].status, 200) << responses[0].body;
    EXPECT_EQ(json::parse(responses[0].body).at("object"), "list") << responses[0].body;
    ASSERT_EQ(responses[1].status, 200) << responses[1].body;
    const json completion = json::parse(responses[1].body);
    EXPECT_EQ(completion.at("object"), "text_completion") << responses[1].body;
    EXPECT_EQ(completion.at("usage").at("completion_tokens"), 4) << responses[1].body;
  }
}

TEST_F(HttpEdgesTest, AnswersHttp10WithoutChunks) {
  auto models = RoundTrip(*http_, "GET /v1/models HTTP/1.0\r\n\r\n");
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].status, 200);
  EXPECT_TRUE(models[0].has_content_length);
  EXPECT_FALSE(models[0].chunked);

  auto streamed = RoundTrip(*http_, Completion(true, "1.0"));
  ASSERT_EQ(streamed.size(), 1u);
  const WireResponse& r = streamed[0];
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("transfer-encoding"), "") << "RFC 9112 forbids chunks to HTTP/1.0";
  EXPECT_FALSE(r.chunked);
  EXPECT_FALSE(r.has_content_length);
  EXPECT_NE(r.body.find("data: {"), std::string::npos) << r.body;
  ASSERT_GE(r.body.size(), 14u);
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n") << "the stream ends complete, then the close";
}

TEST_F(HttpEdgesTest, Answers431ForAHeaderFloodAnd100Continue) {
  auto flood = RoundTrip(*http_, "GET /v1/models HTTP/1.1\r\nHost: floe\r\nX-Flood: " + std::string(64 << 10, 'h') +
                                     "\r\n\r\n");
  ASSERT_EQ(flood.size(), 1u);
  EXPECT_EQ(flood[0].status, 431);
  EXPECT_NE(flood[0].body.find("header bytes"), std::string::npos) << flood[0].body;

  const std::string request = Completion(false, "1.1", "Expect: 100-continue\r\nConnection: close\r\n");
  const size_t body_at = request.find("\r\n\r\n") + 4;
  RawConnection c(*http_);
  ASSERT_TRUE(c.Send(request.substr(0, body_at)));
  ASSERT_TRUE(c.ReadUntil([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }, kTimeoutMs));
  EXPECT_EQ(c.received(), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(c.Send(request.substr(body_at)));
  EXPECT_TRUE(c.ReadToClose(kTimeoutMs));
  auto responses = ParseResponses(c.received(), true);
  ASSERT_EQ(responses.size(), 2u) << c.received();
  EXPECT_EQ(responses[1].status, 200) << responses[1].body;
}

TEST_F(HttpEdgesTest, OneClientHoldingMetricsConnectionsStarvesNoScraper) {
  const std::string url = MetricsUrl(cluster_->router());
  ASSERT_EQ(url.rfind("http://", 0), 0u) << url;
  const std::string address = url.substr(7, url.rfind('/') - 7);
  std::vector<std::unique_ptr<RawConnection>> hog;
  for (int i = 0; i < 300; ++i) {
    hog.push_back(std::make_unique<RawConnection>(address, "127.0.0.1"));
    ASSERT_TRUE(hog.back()->connected()) << "connection " << i;
  }
  int ok = 0;
  for (int i = 0; i < 30; ++i) {
    RawConnection scraper(address, "127.0.0.2");
    ASSERT_TRUE(scraper.connected());
    ASSERT_TRUE(scraper.Send("GET /metrics HTTP/1.1\r\nHost: scraper\r\nConnection: close\r\n\r\n"));
    scraper.ReadToClose(kTimeoutMs);
    auto responses = ParseResponses(scraper.received(), true);
    if (responses.size() == 1 && responses[0].status == 200 &&
        responses[0].body.find("floe_router_") != std::string::npos)
      ++ok;
  }
  EXPECT_EQ(ok, 30) << "scrapes from 127.0.0.2 while 127.0.0.1 held 300 connections";
  hog.clear();
  auto served = RoundTrip(*http_, Completion(false, "1.1", "Connection: close\r\n"));
  ASSERT_EQ(served.size(), 1u);
  EXPECT_EQ(served[0].status, 200) << served[0].body;
}

}  // namespace
}  // namespace floe::testing
