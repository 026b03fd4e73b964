#include "common/service/descriptor_limit.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"

namespace floe {
namespace {

// The kernel's default fs.nr_open, for when /proc cannot be read.
constexpr uint64_t kDefaultNrOpen = 1 << 20;

uint64_t ReadNrOpen() {
  std::ifstream in("/proc/sys/fs/nr_open");
  uint64_t value = 0;
  if (in >> value && value > 0) return value;
  return kDefaultNrOpen;
}

int64_t ForLog(uint64_t limit) { return limit == RLIM_INFINITY ? -1 : static_cast<int64_t>(limit); }

}  // namespace

uint64_t DescriptorSoftTarget(rlim_t hard, uint64_t nr_open) {
  return hard == RLIM_INFINITY ? nr_open : static_cast<uint64_t>(hard);
}

absl::StatusOr<DescriptorLimits> RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
    return absl::InternalError(absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  DescriptorLimits result{limit.rlim_cur, limit.rlim_cur, limit.rlim_max};
  const uint64_t target = DescriptorSoftTarget(limit.rlim_max, ReadNrOpen());
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < target) {
    limit.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
      return absl::InternalError(absl::StrCat("setrlimit(RLIMIT_NOFILE, soft ", target, "): ", std::strerror(errno)));
    result.soft = target;
  }
  return result;
}

void LogDescriptorLimits(const char* component, const DescriptorLimits& limits) {
  LogEvent(LogLevel::kInfo, component, "descriptor_limit",
           {{"soft_was", ForLog(limits.soft_before)}, {"soft", ForLog(limits.soft)}, {"hard", ForLog(limits.hard)}});
}

}  // namespace floe
