// ServerRunner's listener: exactly the one socket it prints (issue 41: with
// SO_REUSEPORT, gRPC 1.51 cloned a port-0 listener onto a second free port).
#include "common/rpc/server_runner.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>

#include <gtest/gtest.h>

#include "tests/common/rpc/listening_ports.h"

namespace floe {
namespace {

using ::floe::testing::ListeningTcpPorts;

std::vector<int> Added(const std::vector<int>& before, const std::vector<int>& after) {
  std::vector<int> added;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
  return added;
}

// Reflection registers a synchronous service: a server with only the
// (callback) health service would not start.
ServerOptions Options(const std::string& address) {
  ServerOptions options;
  options.address = address;
  options.reflection = true;
  return options;
}

TEST(ServerRunnerTest, PortZeroOpensOneListeningSocket) {
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    const std::vector<int> before = ListeningTcpPorts(getpid());
    auto runner = ServerRunner::Start(Options(host + ":0"), {});
    ASSERT_TRUE(runner.ok()) << runner.status();
    EXPECT_EQ(Added(before, ListeningTcpPorts(getpid())), std::vector<int>{(*runner)->port()}) << host;
    EXPECT_EQ((*runner)->address(), host + ":" + std::to_string((*runner)->port()));
    (*runner)->Shutdown(std::chrono::milliseconds(0));
    EXPECT_EQ(ListeningTcpPorts(getpid()), before) << host << ": the listener outlived Shutdown";
  }
}

TEST(ServerRunnerTest, TakenPortIsRefusedNotShared) {
  auto first = ServerRunner::Start(Options("127.0.0.1:0"), {});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = ServerRunner::Start(Options(taken), {});
  ASSERT_FALSE(second.ok()) << "a second server bound " << taken << " beside the first";
  EXPECT_NE(second.status().message().find(taken), std::string::npos) << second.status();
}

}  // namespace
}  // namespace floe
