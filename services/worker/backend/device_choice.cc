#include "services/worker/backend/device_choice.h"

#include "absl/strings/str_cat.h"

namespace floe {

absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view flag, bool built_with_cuda, int visible_cuda_devices,
                                          int ranks) {
  if (flag != "auto" && flag != "cpu" && flag != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--device must be auto, cpu or cuda, got \"", flag, "\""));
  }
  if (flag == "cpu") return DeviceChoice{Device::kCpu, "--device cpu"};
  // What stops the CUDA backend here, if anything.
  std::string missing;
  if (!built_with_cuda) {
    missing = "this floe-worker was built without CUDA (no nvcc at build time)";
  } else if (visible_cuda_devices <= 0) {
    missing = "no CUDA device is visible";
  } else if (ranks > 1) {
    missing = absl::StrCat("the CUDA backend runs one rank; a worker over ", ranks,
                           " ranks (--tensor-parallel-size x --sequence-parallel-size) runs on the CPU");
  }
  if (flag == "cuda") {
    if (!missing.empty()) return absl::FailedPreconditionError(absl::StrCat("--device cuda: ", missing));
    return DeviceChoice{Device::kCuda, "--device cuda"};
  }
  if (!missing.empty()) return DeviceChoice{Device::kCpu, absl::StrCat("--device auto: ", missing)};
  return DeviceChoice{Device::kCuda,
                      absl::StrCat("--device auto: ", visible_cuda_devices, " CUDA device(s) visible, using device 0")};
}

}  // namespace floe
