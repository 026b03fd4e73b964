// The connection caps' arithmetic: a cap from the descriptor limit, and the
// total and per-client counts as connections come and go.
#include "common/http/connection_limits.h"

#include <climits>

#include "gtest/gtest.h"

namespace floe::http {
namespace {

TEST(ConnectionCapForFdLimitTest, KeepsTheReserveFree) {
  EXPECT_EQ(ConnectionCapForFdLimit(1024, 64), 960);
  EXPECT_EQ(ConnectionCapForFdLimit(1024, 0), 1024);
  EXPECT_EQ(ConnectionCapForFdLimit(1024, -5), 1024) << "a negative reserve reserves nothing";
  EXPECT_EQ(ConnectionCapForFdLimit(-1, 64), INT_MAX) << "unlimited";
  EXPECT_EQ(ConnectionCapForFdLimit(1L << 40, 64), INT_MAX);
  EXPECT_EQ(ConnectionCapForFdLimit(64, 64), 1) << "at least one connection";
  EXPECT_EQ(ConnectionCapForFdLimit(10, 64), 1);
}

TEST(ConnectionLimitsTest, CapsEachClientAndTheTotal) {
  ConnectionLimits limits(5, 2);
  EXPECT_TRUE(limits.TryAdmit("10.0.0.1"));
  EXPECT_TRUE(limits.TryAdmit("10.0.0.1"));
  EXPECT_FALSE(limits.TryAdmit("10.0.0.1")) << "over the per-client cap";
  EXPECT_EQ(limits.from("10.0.0.1"), 2);
  EXPECT_TRUE(limits.TryAdmit("10.0.0.2"));
  EXPECT_TRUE(limits.TryAdmit("10.0.0.2"));
  EXPECT_TRUE(limits.TryAdmit("10.0.0.3"));
  EXPECT_FALSE(limits.TryAdmit("10.0.0.4")) << "over the total";
  EXPECT_EQ(limits.from("10.0.0.4"), 0) << "a refusal counts nothing";
  EXPECT_EQ(limits.total(), 5);
  limits.Release("10.0.0.1");
  EXPECT_TRUE(limits.TryAdmit("10.0.0.4"));
  EXPECT_FALSE(limits.TryAdmit("10.0.0.1")) << "the total is full again";
  limits.Release("10.0.0.2");
  EXPECT_TRUE(limits.TryAdmit("10.0.0.1"));
  EXPECT_EQ(limits.from("10.0.0.1"), 2);
  limits.Release("10.0.0.9");  // never admitted: nothing to release
  EXPECT_EQ(limits.total(), 5);
}

TEST(ConnectionLimitsTest, NoPerClientCapWhenZero) {
  ConnectionLimits limits(100, 0);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(limits.TryAdmit("127.0.0.1"));
  EXPECT_FALSE(limits.TryAdmit("127.0.0.1"));
  EXPECT_EQ(limits.from("127.0.0.1"), 100);
}

}  // namespace
}  // namespace floe::http
