// LivenessMonitor against real gRPC servers on loopback (ServerRunner: the
// health service every Floe service runs) and a listener that never answers.
// Every wait is bounded. Checks run 50 ms apart here (one a second in floe
// local) under floe local's 2 s deadline, so a live server on a loaded
// (or sanitized) machine is never taken for a hung one.
#include "services/cli/liveness_monitor.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rpc/server_runner.h"
#include "floe/v1/router.grpc.pb.h"
#include "gtest/gtest.h"

namespace floe {
namespace {

using std::chrono::milliseconds;

LivenessMonitor::Options Fast() {
  return {.interval = milliseconds(50), .deadline = milliseconds(2000), .failures = 3};
}

std::unique_ptr<ServerRunner> Serve(const std::string& address = "127.0.0.1:0") {
  // gRPC starts no server without a service of its own: one that answers
  // every call UNIMPLEMENTED will do beside health.
  static floe::v1::Floe::Service* unimplemented = new floe::v1::Floe::Service();
  ServerOptions options;
  options.address = address;
  auto runner = ServerRunner::Start(options, {unimplemented});
  EXPECT_TRUE(runner.ok()) << runner.status();
  return runner.ok() ? std::move(runner).value() : nullptr;
}

// Polls the monitor every 10 ms until `done` holds (true) or 20 s pass
// (false); every verdict it returns meanwhile is appended to `verdicts`.
bool PollUntil(LivenessMonitor& monitor, const std::function<bool()>& done,
               std::vector<LivenessMonitor::Verdict>& verdicts) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    for (auto& v : monitor.Poll()) verdicts.push_back(std::move(v));
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST(LivenessMonitorTest, AServiceNotYetReadyIsNeverJudged) {
  auto server = Serve();  // NOT_SERVING: a worker still loading
  ASSERT_NE(server, nullptr);
  LivenessMonitor monitor(Fast(), grpc::InsecureChannelCredentials());
  monitor.Watch(0, server->address());
  std::vector<LivenessMonitor::Verdict> verdicts;
  ASSERT_TRUE(PollUntil(monitor, [&] { return monitor.checks_finished(0) >= 5; }, verdicts));
  EXPECT_FALSE(monitor.ready(0));
  // Gone before it was ever ready: still not judged (start-up has its own
  // timeout), however many checks fail.
  server.reset();
  const int before = monitor.checks_finished(0);
  ASSERT_TRUE(PollUntil(monitor, [&] { return monitor.checks_finished(0) >= before + 3 * Fast().failures; }, verdicts));
  EXPECT_TRUE(verdicts.empty()) << verdicts[0].reason;
}

TEST(LivenessMonitorTest, AReadyServiceThatStopsAnsweringIsReportedOnceAfterKFailuresInARow) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  server->SetServing(true);
  LivenessMonitor monitor(Fast(), grpc::InsecureChannelCredentials(), "an-internal-key");
  monitor.Watch(7, server->address());
  // One check at once, waited for (floe local's round before it reports
  // ready); it may or may not have answered on a loaded machine.
  EXPECT_TRUE(monitor.CheckAllNow().empty());
  EXPECT_EQ(monitor.checks_finished(7), 1);
  std::vector<LivenessMonitor::Verdict> verdicts;
  ASSERT_TRUE(PollUntil(monitor, [&] { return monitor.ready(7); }, verdicts));
  // Answers of any status keep it alive: NOT_SERVING (draining) is an answer.
  server->SetServing(false);
  const int before = monitor.checks_finished(7);
  ASSERT_TRUE(PollUntil(monitor, [&] { return monitor.checks_finished(7) >= before + 2 * Fast().failures; }, verdicts));
  EXPECT_TRUE(verdicts.empty()) << verdicts[0].reason;

  server.reset();  // its port refuses from now on
  ASSERT_TRUE(PollUntil(monitor, [&] { return !verdicts.empty(); }, verdicts));
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].id, 7u);
  EXPECT_EQ(verdicts[0].failed_checks, Fast().failures);
  EXPECT_NE(verdicts[0].reason.find("3 health checks in a row unanswered"), std::string::npos) << verdicts[0].reason;
  EXPECT_NE(verdicts[0].reason.find("UNAVAILABLE"), std::string::npos) << verdicts[0].reason;
  // Reported once: it is no longer watched until Watch again.
  EXPECT_FALSE(monitor.ready(7));
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(monitor.Poll().empty());
    std::this_thread::sleep_for(milliseconds(10));
  }
}

TEST(LivenessMonitorTest, AServiceThatHangsTimesOutAndAReplacementOnItsPortIsReadyAgain) {
  // A listener whose connections the kernel accepts and nobody serves: a
  // stopped process's port.
  const int silent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(silent, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  auto server = Serve();
  ASSERT_NE(server, nullptr);
  server->SetServing(true);
  LivenessMonitor monitor(Fast(), grpc::InsecureChannelCredentials());
  monitor.Watch(1, server->address());
  monitor.Watch(2, absl::StrCat("127.0.0.1:", port));
  std::vector<LivenessMonitor::Verdict> verdicts;
  // The silent one's checks end at their deadline (they are counted, never
  // answered); the other is unaffected by it.
  ASSERT_TRUE(PollUntil(monitor, [&] { return monitor.ready(1) && monitor.checks_finished(2) >= 2; }, verdicts));
  EXPECT_FALSE(monitor.ready(2));
  EXPECT_TRUE(verdicts.empty());
  ::close(silent);

  // Replaced on the same port (as floe local restarts a service), watched
  // again: ready at its first answer, on a fresh channel.
  const std::string address = server->address();
  server.reset();
  auto replacement = Serve(address);
  ASSERT_NE(replacement, nullptr);
  replacement->SetServing(true);
  monitor.Watch(1, address);
  EXPECT_FALSE(monitor.ready(1));
  ASSERT_TRUE(PollUntil(monitor, [&] { return monitor.ready(1); }, verdicts));
  EXPECT_TRUE(verdicts.empty());
}

}  // namespace
}  // namespace floe
