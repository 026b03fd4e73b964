// Rank 0's local ranks (--rank-launch local, T x S > 1): ranks 1..n-1 run
// as child processes of this binary, with the same flags plus --rank R
// --rank-dir DIR --metrics-port -1, their stdout on /dev/null (stdout lines
// are rank 0's), killed when rank 0 dies (PDEATHSIG). They meet in DIR, a
// fresh folder under /tmp. A watcher thread reaps them: a rank that exits
// while the worker runs fails the worker at once (RankFailure, even idle);
// after Stop() exits are expected (rank 0's engine stops them).
//
// Thread: Start, Stop and the destructor from main's thread; the watcher is
// detached (a failed start must not wait for it) and shares only the pids
// and the stop flag.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/worker/rank_backend.h"
#include "services/worker/worker_flags.h"

namespace floe {

class LocalRanks {
 public:
  // Makes the folder (into flags.rank_dir), forks the ranks, prints "rank R
  // pid P" for each and logs "rank_started". Failures are logged
  // ("rank_dir_failed", "ranks_failed") and returned.
  static absl::StatusOr<std::unique_ptr<LocalRanks>> Start(int argc, char** argv, WorkerFlags& flags, int ranks,
                                                           RankFailure on_failure);
  // Stop(), then removes the folder.
  ~LocalRanks();

  // From now on a rank's exit is expected: call before stopping the engine.
  void Stop();

 private:
  struct Watch;
  LocalRanks(std::shared_ptr<Watch> watch, std::string dir) : watch_(std::move(watch)), dir_(std::move(dir)) {}
  std::shared_ptr<Watch> watch_;
  std::string dir_;
};

}  // namespace floe
