#include "services/worker/rank_launch.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"

namespace floe {
namespace {

// Starts ranks 1..ranks-1 (this binary, the same flags plus --rank and
// --rank-dir); their pids by rank (index 0 unused).
absl::StatusOr<std::vector<pid_t>> ForkRanks(int argc, char** argv, const std::string& rank_dir, int ranks) {
  std::vector<pid_t> pids(ranks, -1);
  for (int r = 1; r < ranks; ++r) {
    // Everything the child needs is built before fork: other threads run
    // (gRPC), so the child may only make async-signal-safe calls until exec.
    std::vector<std::string> args(argv, argv + argc);
    args.insert(args.end(), {"--rank", std::to_string(r), "--rank-dir", rank_dir, "--metrics-port", "-1"});
    std::vector<char*> cargs;
    for (std::string& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive rank 0
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDOUT_FILENO);  // stdout lines are rank 0's
      execv("/proc/self/exe", cargs.data());
      _exit(127);
    }
    pids[r] = pid;
  }
  return pids;
}

}  // namespace

// Shared with the detached watcher thread, which may outlive the LocalRanks.
struct LocalRanks::Watch {
  std::vector<pid_t> pids;
  std::atomic<bool> stopping{false};
};

absl::StatusOr<std::unique_ptr<LocalRanks>> LocalRanks::Start(int argc, char** argv, WorkerFlags& flags, int ranks,
                                                              RankFailure on_failure) {
  char dir_template[] = "/tmp/floe-ranks-XXXXXX";
  if (!mkdtemp(dir_template)) {
    const absl::Status status = absl::InternalError(std::strerror(errno));
    LogEvent(LogLevel::kError, "worker", "rank_dir_failed", {{"error", std::string(status.message())}});
    return status;
  }
  flags.rank_dir = dir_template;
  auto pids = ForkRanks(argc, argv, flags.rank_dir, ranks);
  if (!pids.ok()) {
    LogEvent(LogLevel::kError, "worker", "ranks_failed", {{"error", std::string(pids.status().message())}});
    return pids.status();
  }
  auto watch = std::make_shared<Watch>();
  watch->pids = *std::move(pids);
  for (int r = 1; r < ranks; ++r) {
    std::printf("rank %d pid %d\n", r, static_cast<int>(watch->pids[r]));
    LogEvent(LogLevel::kInfo, "worker", "rank_started",
             {{"rank", static_cast<int64_t>(r)}, {"pid", static_cast<int64_t>(watch->pids[r])}});
  }
  std::fflush(stdout);
  std::thread([watch, on_failure, ranks] {
    for (int alive = ranks - 1; alive > 0; --alive) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, 0);
      if (pid <= 0) return;
      const int64_t rank = std::find(watch->pids.begin(), watch->pids.end(), pid) - watch->pids.begin();
      if (!watch->stopping.load())
        on_failure(absl::StrCat("rank process ", pid, " exited (status ", status, ")"), rank);
    }
  }).detach();
  return std::unique_ptr<LocalRanks>(new LocalRanks(std::move(watch), flags.rank_dir));
}

LocalRanks::~LocalRanks() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void LocalRanks::Stop() { watch_->stopping = true; }

}  // namespace floe
