// `floe local` supervises what it starts (issue 17's probe: one kill -9 was
// a full outage). Kill a worker and the suffix-cache with SIGKILL: the
// router keeps serving on the other worker, floe local restarts both on
// their ports, and the cluster serves every session again; SIGTERM still
// stops it cleanly. And every service it starts shares the run's own
// internal key, which a client that skips the router does not have.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/metrics/http_get.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

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
  // Liveness checks are hung_service_test's subject: here a worker slowed by
  // the sanitizers on a busy host must not be taken for a hung one.
  auto local = Subprocess::Spawn({BinaryPath("floe"), "local", "--builtin", "tiny", "--workers", "2", "--port", "0",
                                  "--threads", "1", "--speculative", "suffix", "--liveness-checks", "0"});
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

// A process's command line, from /proc.
std::vector<std::string> CommandLine(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::vector<std::string> argv;
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  return argv;
}

// The value after `flag` in `argv`; "" when absent.
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

TEST(LocalSupervisionTest, EveryServiceGetsTheRunsInternalKeyAndAWorkerRefusesCallersWithoutIt) {
  auto local = Subprocess::Spawn({BinaryPath("floe"), "local", "--builtin", "tiny", "--workers", "1", "--port", "0",
                                  "--threads", "1", "--speculative", "suffix", "--weight-cache-max-gb", "3.5"});
  ASSERT_TRUE(local.ok()) << local.status();
  auto address = (*local)->WaitForLine("router listening on ", std::chrono::seconds(120));
  ASSERT_TRUE(address.ok()) << address.status();
  const pid_t parent = (*local)->pid();
  std::vector<pid_t> children;
  for (const char* binary : {"floe-router", "floe-worker", "floe-suffix-cache"}) {
    const std::vector<pid_t> found = ChildrenRunning(parent, binary);
    ASSERT_EQ(found.size(), 1u) << binary;
    children.push_back(found[0]);
  }
  // One key file for the run, handed to all three, readable by its owner only.
  const std::string key_file = FlagValue(CommandLine(children[0]), "--internal-key-file");
  ASSERT_FALSE(key_file.empty()) << "the router got no --internal-key-file";
  for (pid_t child : children) EXPECT_EQ(FlagValue(CommandLine(child), "--internal-key-file"), key_file) << child;
  // Its workers get floe local's weight cache bound.
  EXPECT_EQ(FlagValue(CommandLine(children[1]), "--weight-cache-max-gb"), "3.5");
  struct stat st;
  ASSERT_EQ(stat(key_file.c_str(), &st), 0) << key_file;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(key_file);
  std::stringstream key;
  key << in.rdbuf();
  ASSERT_EQ(key.str().size(), 64u);

  // The worker (the router's --workers) refuses a caller without the key
  // and answers one with it.
  const std::string worker = FlagValue(CommandLine(children[0]), "--workers");
  ASSERT_FALSE(worker.empty());
  auto stub = floe::v1::Worker::NewStub(grpc::CreateChannel(worker, grpc::InsecureChannelCredentials()));
  for (bool with_key : {false, true}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (with_key) context.AddMetadata("authorization", "Bearer " + key.str());
    floe::v1::ModelInfo info;
    const grpc::Status status = stub->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), &info);
    if (with_key) {
      EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
    }
  }

  // Gone with the run.
  kill(parent, SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return (*local)->Exited(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(WIFEXITED((*local)->exit_status()) && WEXITSTATUS((*local)->exit_status()) == 0);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(key_file).parent_path())) << key_file;
}

// --weight-cache-max-gb: the worker's default and meaning in --help, and
// a bound the worker would refuse is refused before anything starts (exit
// 2, the worker's message).
TEST(LocalSupervisionTest, TheWeightCacheBoundIsTheWorkersAndIsCheckedFirst) {
  const std::string log = ::testing::TempDir() + "/local_weight_cache_bound.log";
  auto run = [&](const std::vector<std::string>& args) {
    std::remove(log.c_str());
    std::vector<std::string> argv = LogTo(log);
    argv.insert(argv.end(), {BinaryPath("floe"), "local"});
    argv.insert(argv.end(), args.begin(), args.end());
    auto local = Subprocess::Spawn(argv);
    EXPECT_TRUE(local.ok()) << local.status();
    if (!local.ok()) return -1;
    EXPECT_TRUE(WaitFor([&] { return (*local)->Exited(); }, std::chrono::seconds(30)));
    return WIFEXITED((*local)->exit_status()) ? WEXITSTATUS((*local)->exit_status()) : -1;
  };
  for (const char* bad : {"-1", "1000001", "nan"}) {
    EXPECT_EQ(run({"--builtin", "tiny", "--port", "0", "--weight-cache-max-gb", bad}), 2) << bad;
    EXPECT_TRUE(absl::StrContains(ReadWholeFile(log), "--weight-cache-max-gb must be in [0, 1e6], got"))
        << bad << ": " << ReadWholeFile(log);
  }
  auto help = Subprocess::Spawn({BinaryPath("floe"), "local", "--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  (void)(*help)->WaitForLine("no such line", std::chrono::seconds(30));
  std::string text;
  for (const std::string& line : (*help)->lines()) text += line + "\n";
  // Its entry runs to the next option's.
  const size_t entry = text.find("  --weight-cache-max-gb ");
  ASSERT_NE(entry, std::string::npos) << text;
  const std::string help_entry = text.substr(entry, text.find("\n  --", entry + 1) - entry);
  EXPECT_TRUE(absl::StrContains(help_entry, "bound of the weight cache folder, GiB")) << help_entry;
  EXPECT_TRUE(absl::StrContains(help_entry, "(default: 64)")) << help_entry;
}

}  // namespace
}  // namespace floe::testing
