// Which device a worker runs on (--device auto|cpu|cuda), decided once at
// start from what this build and machine have, with the reason logged.
// Pure: the caller passes what the CUDA runtime sees (kernels/cuda's
// DeviceCount, or 0 in a build without CUDA).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe {

enum class Device { kCpu, kCuda };

inline const char* DeviceName(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

struct DeviceChoice {
  Device device = Device::kCpu;
  std::string why;  // for the log line
};

// auto: cuda where the build has it, a device is visible and the worker is
// one rank; else cpu. cuda: an error saying what is missing (the CUDA
// backend runs one rank for now). cpu: cpu.
absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view flag, bool built_with_cuda, int visible_cuda_devices,
                                          int ranks);

}  // namespace floe
