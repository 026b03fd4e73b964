// The /metrics endpoint survives clients that connect and send nothing
// (issue 17's probe: two idle TCP connections blinded every service's
// metrics for as long as they stayed open under civetweb's thread per
// connection). On common/http an idle connection holds no thread, so a
// scrape answers at once with 16 of them open. Nor can one client holding
// hundreds of connections starve scrapers from other addresses (issue 41: 256
// connections from one client failed 27 of 30 scrapes): each address gets a
// few. TLS on this endpoint is checked end to end in
// tests/integration/tls_test.mjs.
#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "common/metrics/http_get.h"
#include "tests/common/http/http_test_client.h"

namespace floe {
namespace {

// From `source_ip`: 8 connections an address are admitted, so 16 idle ones
// come from two addresses other than the scraper's.
int ConnectIdle(int port, const char* source_ip) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in source{};
  source.sin_family = AF_INET;
  inet_pton(AF_INET, source_ip, &source.sin_addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

TEST(MetricsServerTest, IdleConnectionsDoNotBlindTheEndpoint) {
  auto server = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::BuildCounter().Name("floe_test_total").Help("test").Register((*server)->registry()).Add({}).Increment();
  const std::string url = (*server)->url();
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(ConnectIdle(port, i % 2 == 0 ? "127.0.0.3" : "127.0.0.4"));
  const auto start = std::chrono::steady_clock::now();
  auto body = HttpGet(url);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_NE(body->find("floe_test_total 1"), std::string::npos);
  EXPECT_LT(seconds, 1.0);
  std::printf("scrape with 16 idle connections open: %.2f s\n", seconds);
  for (int fd : idle) close(fd);
}

TEST(MetricsServerTest, AnswersOnlyGetMetrics) {
  auto server = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string url = (*server)->url();
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  auto other = HttpGet(url.substr(0, url.rfind('/')) + "/other");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(std::string(other.status().message()).find("404"), std::string::npos) << other.status();
}

TEST(MetricsServerTest, ScrapesAddedCollectablesToo) {
  auto server = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto extra = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("floe_extra_gauge").Help("test").Register(*extra).Add({{"k", "v"}}).Set(7);
  (*server)->Add(extra);
  auto body = HttpGet((*server)->url());
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_NE(body->find("# TYPE floe_extra_gauge gauge"), std::string::npos) << *body;
  EXPECT_NE(body->find("floe_extra_gauge{k=\"v\"} 7"), std::string::npos) << *body;
}

TEST(MetricsServerTest, APortInUseIsAnError) {
  auto first = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string url = (*first)->url();
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  auto second = MetricsServer::Start("127.0.0.1", port);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(std::string(second.status().message()).find("metrics: cannot listen on 127.0.0.1:"), std::string::npos)
      << second.status();
}

TEST(MetricsServerTest, OneClientHoldingConnectionsDoesNotStarveAnotherScraper) {
  auto server = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::BuildCounter().Name("floe_test_total").Help("test").Register((*server)->registry()).Add({}).Increment();
  const std::string url = (*server)->url();
  const std::string address = url.substr(7, url.rfind('/') - 7);  // http://HOST:PORT/metrics
  // 300 from 127.0.0.1, more than the endpoint's 256 in all, each held open.
  std::vector<std::unique_ptr<testing::RawConnection>> hog;
  for (int i = 0; i < 300; ++i) {
    hog.push_back(std::make_unique<testing::RawConnection>(address, "127.0.0.1"));
    ASSERT_TRUE(hog.back()->connected()) << "connection " << i;
  }
  // Every scrape from another address (the whole 127/8 is loopback) succeeds.
  int ok = 0;
  for (int i = 0; i < 30; ++i) {
    testing::RawConnection scraper(address, "127.0.0.2");
    ASSERT_TRUE(scraper.connected());
    ASSERT_TRUE(scraper.Send("GET /metrics HTTP/1.1\r\nHost: scraper\r\nConnection: close\r\n\r\n"));
    scraper.ReadToClose(10000);
    auto responses = testing::ParseResponses(scraper.received(), true);
    if (responses.size() == 1 && responses[0].status == 200 &&
        responses[0].body.find("floe_test_total 1") != std::string::npos)
      ++ok;
  }
  EXPECT_EQ(ok, 30);
  // The hog itself kept only a few: the rest were closed unanswered.
  auto closed = [&] {
    int n = 0;
    for (auto& c : hog) n += c->closed() || c->ReadToClose(0) ? 1 : 0;
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (closed() < 300 - 8 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(closed(), 300 - 8);
}

}  // namespace
}  // namespace floe
