#include "services/worker/backend/device_choice.h"

#include "absl/strings/str_cat.h"

namespace floe {

absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view flag, const DeviceSupport& support, int ranks,
                                          int ranks_here) {
  if (flag != "auto" && flag != "cpu" && flag != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--device must be auto, cpu or cuda, got \"", flag, "\""));
  }
  if (flag == "cpu") return DeviceChoice{Device::kCpu, "--device cpu"};
  // What stops the CUDA backend here, if anything.
  std::string missing;
  if (!support.built_with_cuda) {
    missing = "this floe-worker was built without CUDA (no nvcc at build time)";
  } else if (support.visible_gpus <= 0) {
    missing = "no CUDA device is visible";
  } else if (ranks > 1 && !support.built_with_nccl) {
    missing = absl::StrCat("a worker over ", ranks, " ranks needs NCCL, which this build did not find");
  } else if (ranks_here > support.visible_gpus) {
    missing = absl::StrCat(ranks_here, " ranks on this machine need a GPU each; ", support.visible_gpus,
                           " visible");
  }
  if (flag == "cuda") {
    if (!missing.empty()) return absl::FailedPreconditionError(absl::StrCat("--device cuda: ", missing));
    return DeviceChoice{Device::kCuda, "--device cuda"};
  }
  if (!missing.empty()) return DeviceChoice{Device::kCpu, absl::StrCat("--device auto: ", missing)};
  return DeviceChoice{Device::kCuda, absl::StrCat("--device auto: ", support.visible_gpus,
                                                  " CUDA device(s) visible, one per rank from device 0")};
}

}  // namespace floe
