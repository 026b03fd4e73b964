// Which device a worker runs on (--device auto|cpu|cuda), decided once at
// start from what this build and machine have, with the reason logged.
// Pure: the caller says what the build has and what the CUDA runtime sees
// (kernels/cuda's DeviceCount, or 0 in a build without CUDA).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe {

enum class Device { kCpu, kCuda };

inline const char* DeviceName(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

struct DeviceSupport {
  bool built_with_cuda = false;
  bool built_with_nccl = false;  // GPU ranks' collectives
  int visible_gpus = 0;
};

struct DeviceChoice {
  Device device = Device::kCpu;
  std::string why;  // for the log line
};

// A worker of `ranks` ranks, `ranks_here` of them on this machine (one GPU
// each). auto: cuda where the build has it (and NCCL, for several ranks) and
// this machine has a GPU per rank; else cpu. cuda: an error saying what is
// missing. cpu: cpu.
absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view flag, const DeviceSupport& support, int ranks,
                                          int ranks_here);

}  // namespace floe
