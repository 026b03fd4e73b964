// `floe local` supervises what it starts (issue 17's probe: one kill -9 was
// a full outage). Kill a worker and the suffix-cache with SIGKILL: the
// router keeps serving on the other worker, floe local restarts both on
// their ports, and the cluster serves every session again; SIGTERM still
// stops it cleanly.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/metrics/http_get.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

// floe local's children whose command line names `binary`.
std::vector<pid_t> ChildrenRunning(pid_t parent, const std::string& binary) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const pid_t pid = std::atoi(entry.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    char state;
    int ppid = 0;
    if (close == std::string::npos || std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != parent || state == 'Z') continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string argv0;
    std::getline(cmdline, argv0, '\0');
    if (argv0.size() >= binary.size() && argv0.compare(argv0.size() - binary.size(), binary.size(), binary) == 0)
      out.push_back(pid);
  }
  return out;
}

bool Serves(floe::v1::Floe::Stub& stub, const std::string& session) {
  floe::v1::GenerateRequest r;
  r.set_text("supervised");
  r.set_session_id(session);
  r.mutable_stopping()->set_max_tokens(4);
  r.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  floe::v1::GenerateResult result;
  const grpc::Status status = stub.GenerateUnary(&context, r, &result);
  if (!status.ok()) std::printf("session %s: %d %s\n", session.c_str(), status.error_code(), status.error_message().c_str());
  return status.ok() && result.token_ids_size() == 4;
}

TEST(LocalSupervisionTest, AKilledWorkerAndSuffixCacheAreRestartedWhileTheRestServes) {
  auto local = Subprocess::Spawn({BinaryPath("floe"), "local", "--builtin", "tiny", "--workers", "2", "--port", "0",
                                  "--threads", "1", "--speculative", "suffix"});
  ASSERT_TRUE(local.ok()) << local.status();
  auto address = (*local)->WaitForLine("router listening on ", std::chrono::seconds(120));
  ASSERT_TRUE(address.ok()) << address.status();
  auto stub = floe::v1::Floe::NewStub(grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  // floe local is ready once one worker is; wait until the router has both.
  std::string router_metrics;
  for (const std::string& line : (*local)->lines())
    if (line.rfind("metrics router ", 0) == 0) router_metrics = line.substr(line.rfind(' ') + 1);
  ASSERT_FALSE(router_metrics.empty());
  auto healthy_workers = [&] {
    int healthy = 0;
    for (absl::string_view line : absl::StrSplit(HttpGet(router_metrics).value_or(""), '\n'))
      healthy += absl::StartsWith(line, "floe_router_worker_healthy{") && absl::EndsWith(line, " 1");
    return healthy;
  };
  ASSERT_TRUE(WaitFor([&] { return healthy_workers() == 2; }, std::chrono::seconds(30)));
  ASSERT_TRUE(Serves(*stub, "before"));
  const pid_t parent = (*local)->pid();
  const std::vector<pid_t> workers = ChildrenRunning(parent, "floe-worker");
  const std::vector<pid_t> caches = ChildrenRunning(parent, "floe-suffix-cache");
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_EQ(caches.size(), 1u);
  kill(workers[0], SIGKILL);
  kill(caches[0], SIGKILL);
  // The rest serves meanwhile: every request succeeds (the router retries a
  // request that hit the dead worker on the other one).
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(Serves(*stub, absl::StrCat("during-", i))) << i;
  EXPECT_FALSE((*local)->Exited()) << "one dead child stopped floe local";
  // Both come back as new processes.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto now_workers = ChildrenRunning(parent, "floe-worker");
        auto now_caches = ChildrenRunning(parent, "floe-suffix-cache");
        return now_workers.size() == 2 && now_caches.size() == 1 && now_caches[0] != caches[0] &&
               std::find(now_workers.begin(), now_workers.end(), workers[0]) == now_workers.end();
      },
      std::chrono::seconds(60)));
  // And every session is served again, the restarted worker's too (the
  // router takes it back once it answers on its old address).
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < 16; ++i)
          if (!Serves(*stub, absl::StrCat("after-", i))) return false;
        return true;
      },
      std::chrono::seconds(30)));
  kill(parent, SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return (*local)->Exited(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(WIFEXITED((*local)->exit_status()) && WEXITSTATUS((*local)->exit_status()) == 0);
}

}  // namespace
}  // namespace floe::testing
