// The /metrics endpoint survives clients that connect and send nothing
// (issue 17's probe: two idle TCP connections blinded every service's
// metrics for as long as they stayed open). With 16 idle connections open,
// a scrape still answers: civetweb closes each after the 2 s idle timeout,
// 8 at a time (its threads), so within 2 x 2 s here.
#include "common/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <gtest/gtest.h>
#include <prometheus/counter.h>

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
  EXPECT_LT(seconds, 6.0);
  std::printf("scrape with 16 idle connections open: %.2f s\n", seconds);
  for (int fd : idle) close(fd);
}

}  // namespace
}  // namespace floe
