// --device: what each build and machine gets, and the errors that say why.
#include "services/worker/backend/device_choice.h"

#include "gtest/gtest.h"

namespace floe {
namespace {

constexpr DeviceSupport kGpus{.built_with_cuda = true, .built_with_nccl = true, .visible_gpus = 2};

TEST(DeviceChoiceTest, AutoTakesVisibleGpusOnePerRank) {
  for (int ranks : {1, 2}) {
    auto choice = ChooseDevice("auto", kGpus, ranks, ranks);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->device, Device::kCuda);
    EXPECT_NE(choice->why.find("2 CUDA device(s) visible"), std::string::npos) << choice->why;
  }
  // Ranks started on other machines need no GPU here.
  auto remote = ChooseDevice("auto", kGpus, 8, 1);
  ASSERT_TRUE(remote.ok());
  EXPECT_EQ(remote->device, Device::kCuda);
}

TEST(DeviceChoiceTest, AutoFallsBackToTheCpuAndSaysWhy) {
  struct Case {
    DeviceSupport support;
    int ranks, here;
    const char* why;
  };
  for (const Case& c : {Case{{false, false, 1}, 1, 1, "built without CUDA"},
                        Case{{true, true, 0}, 1, 1, "no CUDA device is visible"},
                        Case{{true, false, 4}, 2, 2, "needs NCCL"},
                        Case{{true, true, 2}, 4, 4, "4 ranks on this machine need a GPU each; 2 visible"}}) {
    auto choice = ChooseDevice("auto", c.support, c.ranks, c.here);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->device, Device::kCpu);
    EXPECT_NE(choice->why.find(c.why), std::string::npos) << choice->why;
  }
}

TEST(DeviceChoiceTest, CudaWhereItCannotRunIsAnError) {
  auto unbuilt = ChooseDevice("cuda", {false, false, 1}, 1, 1);
  EXPECT_EQ(unbuilt.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unbuilt.status().message().find("built without CUDA"), std::string::npos);
  EXPECT_NE(ChooseDevice("cuda", {true, true, 0}, 1, 1).status().message().find("no CUDA device"),
            std::string::npos);
  EXPECT_NE(ChooseDevice("cuda", {true, true, 1}, 2, 2).status().message().find("need a GPU each"),
            std::string::npos);
  auto ok = ChooseDevice("cuda", {true, false, 1}, 1, 1);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->device, Device::kCuda);
}

TEST(DeviceChoiceTest, CpuIsAlwaysCpuAndOtherNamesAreRefused) {
  auto cpu = ChooseDevice("cpu", kGpus, 1, 1);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->device, Device::kCpu);
  auto bad = ChooseDevice("gpu", kGpus, 1, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"gpu\""), std::string::npos);
}

}  // namespace
}  // namespace floe
