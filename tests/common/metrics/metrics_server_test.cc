// The /metrics endpoint survives clients that connect and send nothing
// (issue 17's probe: two idle TCP connections blinded every service's
// metrics for as long as they stayed open under civetweb's thread per
// connection). On common/http an idle connection holds no thread, so a
// scrape answers at once with 16 of them open. TLS on this endpoint is
// checked end to end in tests/integration/tls_test.mjs.
#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "common/metrics/http_get.h"

namespace floe {
namespace {

int ConnectIdle(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
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
  for (int i = 0; i < 16; ++i) idle.push_back(ConnectIdle(port));
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

}  // namespace
}  // namespace floe
