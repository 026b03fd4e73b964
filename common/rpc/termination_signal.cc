#include "common/rpc/termination_signal.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cerrno>

namespace floe {
namespace {

sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

TerminationSignal::TerminationSignal() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int TerminationSignal::Wait() {
  sigset_t set = TerminationSet();
  int signal = 0;
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

std::optional<int> TerminationSignal::WaitFor(std::chrono::milliseconds timeout) {
  sigset_t set = TerminationSet();
  timespec ts;
  ts.tv_sec = timeout.count() / 1000;
  ts.tv_nsec = (timeout.count() % 1000) * 1000000;
  int signal = sigtimedwait(&set, nullptr, &ts);
  if (signal < 0) return std::nullopt;
  return signal;
}

}  // namespace floe
