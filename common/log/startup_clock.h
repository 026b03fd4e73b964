// Start-up timing of a service, for its structured log: each Phase(name)
// logs the phase that ends now, as {"event":"startup_phase","phase":name,
// "ms":phase time,"since_start_ms":time since the process started}, so a slow
// start says where its time went (read, repack, KV allocation, gRPC start).
// "Process start" is the kernel's start time of this process (before the
// dynamic loader and static initialisers), not the first line of main.
// Threading: one thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace floe {

class StartupClock {
 public:
  explicit StartupClock(const char* component);

  // Logs the phase ending now and starts the next one.
  void Phase(const char* name);
  // Milliseconds since the process started.
  int64_t SinceStartMs() const;
  // The phases so far, in order: (name, ms).
  const std::vector<std::pair<std::string, int64_t>>& phases() const { return phases_; }

 private:
  const char* component_;
  int64_t start_ns_;  // process start, CLOCK_BOOTTIME
  int64_t mark_ns_;   // end of the last phase
  std::vector<std::pair<std::string, int64_t>> phases_;
};

}  // namespace floe
