// Fault: a service that lives on but stops answering (issue 41, item 2).
//
// A worker of `floe local` is SIGSTOPped: its process is still there, so no
// death watch sees it, and its port still completes TCP handshakes while
// nothing answers behind it (what a deadlock or a gRPC port dead after
// descriptor exhaustion looks like from outside). What `floe local`
// promises: once its health checks go unanswered, it kills the stopped
// process (gone from the process table, reaped) and starts a new worker on
// the same port, and the router serves through it again; floe local itself
// stays up and still stops cleanly on SIGTERM.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

// Detection takes at most ~7 s (3 unanswered checks of 2 s, one a second),
// the kill 3 s, the restart a 1 s backoff and the tiny model's load: the
// bounds leave room for a loaded machine.
constexpr auto kReplacedWithin = std::chrono::seconds(30);
constexpr auto kServedWithin = std::chrono::seconds(30);

bool Serves(floe::v1::Floe::Stub& stub, const std::string& session) {
  Generation g = Generate(stub, GreedyRequest("still there?", 4, session), /*timeout_ms=*/10000);
  if (!g.status.ok()) {
    std::printf("%s: %d %s\n", session.c_str(), g.status.error_code(), g.status.error_message().c_str());
  }
  return g.status.ok() && g.token_ids.size() == 4;
}

bool ProcessGone(pid_t pid) { return !std::filesystem::exists(absl::StrCat("/proc/", pid)); }

// Whatever happens in the test, nothing it stopped stays stopped and floe
// local (with its children) goes: a SIGKILLed floe local would orphan them.
class StopAtExit {
 public:
  explicit StopAtExit(Subprocess& local) : local_(local) {}
  ~StopAtExit() {
    if (stopped_ > 0 && !ProcessGone(stopped_)) kill(stopped_, SIGCONT);
    if (local_.Exited()) return;
    kill(local_.pid(), SIGTERM);
    WaitFor([&] { return local_.Exited(); }, std::chrono::seconds(60));
  }
  void Stopped(pid_t pid) { stopped_ = pid; }

 private:
  Subprocess& local_;
  pid_t stopped_ = -1;
};

TEST(HungServiceTest, AStoppedWorkerIsKilledAndRestartedByFloeLocal) {
  auto local = Subprocess::Spawn({BinaryPath("floe"), "local", "--builtin", "tiny", "--workers", "1", "--port", "0",
                                  "--threads", "1", "--speculative", "off"});
  ASSERT_TRUE(local.ok()) << local.status();
  StopAtExit cleanup(**local);
  auto address = (*local)->WaitForLine("router listening on ", std::chrono::seconds(120));
  ASSERT_TRUE(address.ok()) << address.status();
  auto stub = floe::v1::Floe::NewStub(grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(Serves(*stub, "before"));

  const pid_t parent = (*local)->pid();
  const std::vector<pid_t> workers = ChildrenRunning(parent, "floe-worker");
  ASSERT_EQ(workers.size(), 1u);
  const pid_t stopped = workers[0];
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  cleanup.Stopped(stopped);
  const Clock::time_point stopped_at = Clock::now();

  // The stopped process goes (killed and reaped by floe local) and a new
  // worker takes its place.
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::vector<pid_t> now = ChildrenRunning(parent, "floe-worker");
        return ProcessGone(stopped) && now.size() == 1 && now[0] != stopped;
      },
      kReplacedWithin))
      << "the stopped worker " << stopped << " was not replaced within " << kReplacedWithin.count() << " s";
  std::printf("replaced %.1f s after SIGSTOP\n", SecondsSince(stopped_at));
  EXPECT_FALSE((*local)->Exited()) << "a hung child stopped floe local";

  // The router takes the new worker (same port) and serves again.
  int attempt = 0;
  ASSERT_TRUE(WaitFor([&] { return Serves(*stub, absl::StrCat("after-", attempt++)); }, kServedWithin));
  std::printf("served %.1f s after SIGSTOP\n", SecondsSince(stopped_at));

  kill(parent, SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return (*local)->Exited(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(ExitedZero((*local)->exit_status())) << DescribeExit((*local)->exit_status());
}

}  // namespace
}  // namespace floe::testing
