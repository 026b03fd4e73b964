// RaiseDescriptorLimit on this very process: a soft limit below the hard
// one is raised to it, one at the hard limit stays, and an unlimited hard
// limit asks for the kernel's ceiling.
#include "common/service/descriptor_limit.h"

#include <sys/resource.h>

#include <gtest/gtest.h>

namespace floe {
namespace {

rlimit Current() {
  rlimit limit{};
  EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  return limit;
}

TEST(DescriptorLimitTest, RaisesTheSoftLimitToTheHardOne) {
  const rlimit start = Current();
  if (start.rlim_max != RLIM_INFINITY && start.rlim_max < 512) GTEST_SKIP() << "hard limit " << start.rlim_max;
  rlimit lowered = start;
  lowered.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  auto raised = RaiseDescriptorLimit();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->soft_before, 256u);
  EXPECT_EQ(raised->hard, start.rlim_max);
  EXPECT_EQ(Current().rlim_cur, raised->soft);
  EXPECT_EQ(Current().rlim_max, start.rlim_max) << "the hard limit is the operator's";
  if (start.rlim_max != RLIM_INFINITY) EXPECT_EQ(raised->soft, start.rlim_max);
  EXPECT_GT(raised->soft, 256u);
}

TEST(DescriptorLimitTest, LeavesALimitAtTheHardOneAlone) {
  ASSERT_TRUE(RaiseDescriptorLimit().ok());
  const rlimit before = Current();
  auto again = RaiseDescriptorLimit();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->soft_before, again->soft);
  EXPECT_EQ(Current().rlim_cur, before.rlim_cur);
}

TEST(DescriptorLimitTest, UnlimitedHardLimitAsksForTheKernelCeiling) {
  EXPECT_EQ(DescriptorSoftTarget(RLIM_INFINITY, 1048576), 1048576u);
  EXPECT_EQ(DescriptorSoftTarget(20000, 1048576), 20000u);
}

}  // namespace
}  // namespace floe
