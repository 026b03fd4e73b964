#include "common/log/startup_clock.h"

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/log/log.h"

namespace floe {
namespace {

int64_t BootNs() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Field 22 of /proc/self/stat: start time in clock ticks after boot (the
// clock CLOCK_BOOTTIME counts). Falls back to now when unreadable.
int64_t ProcessStartNs(int64_t now) {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t comm_end = stat.rfind(')');  // the command name may hold spaces
  if (comm_end == std::string::npos) return now;
  std::istringstream fields(stat.substr(comm_end + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) {
      const long ticks = sysconf(_SC_CLK_TCK);
      const int64_t start = static_cast<int64_t>(std::stoull(field)) * (1'000'000'000 / ticks);
      return start <= now ? start : now;
    }
  }
  return now;
}

}  // namespace

StartupClock::StartupClock(const char* component) : component_(component) {
  start_ns_ = ProcessStartNs(BootNs());
  mark_ns_ = start_ns_;  // the first phase includes exec and the loader
}

int64_t StartupClock::SinceStartMs() const { return (BootNs() - start_ns_) / 1'000'000; }

void StartupClock::Phase(const char* name) {
  const int64_t now = BootNs();
  const int64_t ms = (now - mark_ns_) / 1'000'000;
  mark_ns_ = now;
  phases_.emplace_back(name, ms);
  LogEvent(LogLevel::kInfo, component_, "startup_phase",
           {{"phase", std::string(name)}, {"ms", ms}, {"since_start_ms", (now - start_ns_) / 1'000'000}});
}

}  // namespace floe
