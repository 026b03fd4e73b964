// RateLimiter: token buckets per tenant, on an explicit clock.
#include "services/router/rate_limiter.h"

#include "gtest/gtest.h"

namespace floe {
namespace {

TEST(RateLimiterTest, RequestsPerSecondPerTenant) {
  RateLimiter limiter(2, 0);
  const auto t0 = RateLimiter::Clock::now();
  EXPECT_TRUE(limiter.Charge("a", 10, t0).ok());
  EXPECT_TRUE(limiter.Charge("a", 10, t0).ok());
  absl::Status third = limiter.Charge("a", 10, t0);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("retry in 0.50 s"), std::string::npos) << third;
  EXPECT_TRUE(limiter.Charge("b", 10, t0).ok()) << "tenants have their own buckets";
  EXPECT_FALSE(limiter.Charge("a", 10, t0 + std::chrono::milliseconds(400)).ok());
  EXPECT_TRUE(limiter.Charge("a", 10, t0 + std::chrono::milliseconds(900)).ok());
}

TEST(RateLimiterTest, TokensPerSecond) {
  RateLimiter limiter(0, 100);
  const auto t0 = RateLimiter::Clock::now();
  EXPECT_TRUE(limiter.Charge("a", 60, t0).ok());
  absl::Status over = limiter.Charge("a", 60, t0);
  EXPECT_NE(over.message().find("retry in 0.20 s"), std::string::npos) << over;
  EXPECT_TRUE(limiter.Charge("a", 60, t0 + std::chrono::milliseconds(200)).ok());
  absl::Status never = limiter.Charge("a", 500, t0 + std::chrono::seconds(10));
  EXPECT_NE(never.message().find("exceeds"), std::string::npos) << never;
}

}  // namespace
}  // namespace floe
