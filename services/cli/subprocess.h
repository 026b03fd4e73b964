// A child process whose stdout we read line by line (to learn the address it
// bound) and whose stderr it shares with us (structured logs pass through).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace floe {

class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(const std::vector<std::string>& argv);
  ~Subprocess();  // Terminate()s the child (5 s grace) if still running

  // Reads stdout until a line starting with `prefix` appears; returns the rest
  // of that line. DEADLINE_EXCEEDED or UNAVAILABLE (child exited) otherwise.
  // Afterwards, unless `keep_reading`, stdout keeps being drained (and echoed
  // to stderr) in the background; with it, WaitForLine may be called again.
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout,
                                          bool keep_reading = false);

  // Every stdout line read so far, up to and including the matched one.
  const std::vector<std::string>& lines() const { return lines_; }

  // True once the child has exited; `exit_status` then holds waitpid's status.
  bool Exited();
  int exit_status() const { return exit_status_; }
  // SIGTERM (and SIGCONT, so a stopped child sees it), wait up to `grace`,
  // then SIGKILL. Returns the exit status.
  int Terminate(std::chrono::milliseconds grace);
  pid_t pid() const { return pid_; }

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  bool exited_ = false;
  int exit_status_ = 0;
  std::string buffered_;
  std::vector<std::string> lines_;
  std::thread drain_;
  std::atomic<bool> stop_draining_{false};
};

}  // namespace floe
