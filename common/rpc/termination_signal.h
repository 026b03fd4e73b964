// SIGTERM/SIGINT as an event to wait for, not a handler: construct it in main()
// before any thread starts (it blocks the signals in every thread created
// afterwards), then Wait() where shutdown should begin.
#pragma once

#include <chrono>
#include <optional>

namespace floe {

class TerminationSignal {
 public:
  TerminationSignal();
  // Blocks until SIGTERM or SIGINT arrives; returns the signal number.
  int Wait();
  // Like Wait(), with a timeout; nullopt when it passes first.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout);
};

}  // namespace floe
