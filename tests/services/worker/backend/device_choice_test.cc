// --device: what each build and machine gets, and the errors that say why.
#include "services/worker/backend/device_choice.h"

#include "gtest/gtest.h"

namespace floe {
namespace {

TEST(DeviceChoiceTest, AutoTakesAVisibleGpuForOneRank) {
  auto choice = ChooseDevice("auto", /*built_with_cuda=*/true, /*visible_cuda_devices=*/2, /*ranks=*/1);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->device, Device::kCuda);
  EXPECT_NE(choice->why.find("2 CUDA device(s) visible"), std::string::npos) << choice->why;
}

TEST(DeviceChoiceTest, AutoFallsBackToTheCpuAndSaysWhy) {
  struct Case {
    bool built;
    int visible, ranks;
    const char* why;
  };
  for (const Case& c : {Case{false, 1, 1, "built without CUDA"}, Case{true, 0, 1, "no CUDA device is visible"},
                        Case{true, 4, 2, "runs one rank"}}) {
    auto choice = ChooseDevice("auto", c.built, c.visible, c.ranks);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->device, Device::kCpu);
    EXPECT_NE(choice->why.find(c.why), std::string::npos) << choice->why;
  }
}

TEST(DeviceChoiceTest, CudaWhereItCannotRunIsAnError) {
  auto unbuilt = ChooseDevice("cuda", false, 1, 1);
  EXPECT_EQ(unbuilt.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unbuilt.status().message().find("built without CUDA"), std::string::npos);
  EXPECT_NE(ChooseDevice("cuda", true, 0, 1).status().message().find("no CUDA device"), std::string::npos);
  EXPECT_NE(ChooseDevice("cuda", true, 1, 4).status().message().find("one rank"), std::string::npos);
  auto ok = ChooseDevice("cuda", true, 1, 1);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->device, Device::kCuda);
}

TEST(DeviceChoiceTest, CpuIsAlwaysCpuAndOtherNamesAreRefused) {
  auto cpu = ChooseDevice("cpu", true, 8, 1);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->device, Device::kCpu);
  auto bad = ChooseDevice("gpu", true, 1, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"gpu\""), std::string::npos);
}

}  // namespace
}  // namespace floe
