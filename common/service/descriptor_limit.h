// Descriptor limits of a service process (issue 41). A shell's soft
// RLIMIT_NOFILE is often 1,024 while its hard limit is far higher; a
// service at the soft limit fails every accept (and gRPC 1.51's listener
// never accepts again), so each service raises its soft limit to the hard
// one at start and logs both. Raising needs no privilege; the hard limit
// is the operator's to set (ulimit -Hn, the container runtime).
//
// Thread: call before threads that open descriptors start (the limit is
// per process; raising it later is harmless but races nothing useful).
#pragma once

#include <sys/resource.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace floe {

struct DescriptorLimits {
  uint64_t soft_before = 0;  // the soft limit the process started with
  uint64_t soft = 0;         // the soft limit now
  uint64_t hard = 0;         // RLIM_INFINITY when unlimited
};

// The soft limit to ask for under hard limit `hard`: the hard limit itself,
// or, when it is unlimited, the kernel's ceiling `nr_open`
// (/proc/sys/fs/nr_open: setrlimit refuses more).
uint64_t DescriptorSoftTarget(rlim_t hard, uint64_t nr_open);

// Raises the soft RLIMIT_NOFILE to DescriptorSoftTarget (never lowers it).
// An error names the syscall; the limits stay as they were then.
absl::StatusOr<DescriptorLimits> RaiseDescriptorLimit();

// Logs "descriptor_limit" for `component`: soft_was, soft, hard (-1:
// unlimited).
void LogDescriptorLimits(const char* component, const DescriptorLimits& limits);

}  // namespace floe
