#include "services/cli/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace floe {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // posix_spawn, not fork: it runs no pthread_atfork handlers (gRPC's threads
  // in this process do not survive those), and it resets the signal mask the
  // parent set to sigwait for SIGTERM/SIGINT.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int spawn_error = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawn_error != 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(spawn_error)));
  }
  close(pipe_fds[1]);
  std::unique_ptr<Subprocess> child(new Subprocess());
  child->pid_ = pid;
  child->stdout_fd_ = pipe_fds[0];
  return child;
}

Subprocess::~Subprocess() {
  // A grace period lets a child that runs children of its own (floe local) stop them.
  if (!Exited()) Terminate(std::chrono::seconds(5));
  stop_draining_.store(true);
  if (drain_.joinable()) drain_.join();
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> Subprocess::WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout,
                                                    bool keep_reading) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    size_t newline;
    while ((newline = buffered_.find('\n')) != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      lines_.push_back(line);
      if (line.rfind(prefix, 0) == 0) {
        if (keep_reading) return line.substr(prefix.size());
        int fd = stdout_fd_;
        std::atomic<bool>* stop = &stop_draining_;
        drain_ = std::thread([fd, stop] {
          // Polls so the destructor can stop it: grandchildren may hold the
          // pipe open after the child is gone, and EOF would never come.
          char buf[4096];
          while (!stop->load()) {
            pollfd pfd{fd, POLLIN, 0};
            if (poll(&pfd, 1, 100) <= 0) continue;
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n <= 0) break;
            if (write(STDERR_FILENO, buf, static_cast<size_t>(n)) < 0) break;
          }
        });
        return line.substr(prefix.size());
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError(absl::StrCat("no \"", prefix, "\" line in time"));
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    if (ready > 0) {
      char buf[4096];
      ssize_t n = read(stdout_fd_, buf, sizeof(buf));
      if (n <= 0) return absl::UnavailableError("child exited before it was ready");
      buffered_.append(buf, static_cast<size_t>(n));
    } else if (Exited()) {
      return absl::UnavailableError(absl::StrCat("child exited (status ", exit_status_, ") before it was ready"));
    }
  }
}

bool Subprocess::Exited() {
  if (exited_) return true;
  int status;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    exit_status_ = status;
  }
  return exited_;
}

int Subprocess::Terminate(std::chrono::milliseconds grace) {
  if (Exited()) return exit_status_;
  kill(pid_, SIGTERM);
  // A stopped child (SIGSTOP, a hung service the supervisor gave up on)
  // holds SIGTERM pending until continued: continue it, so it gets its
  // grace period instead of waiting it out and being killed.
  kill(pid_, SIGCONT);
  const auto give_up = std::chrono::steady_clock::now() + grace;
  while (!Exited() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!Exited()) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    exited_ = true;
    exit_status_ = status;
  }
  return exit_status_;
}

}  // namespace floe
