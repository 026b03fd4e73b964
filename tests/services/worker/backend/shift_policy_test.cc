#include "services/worker/backend/shift_policy.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace floe {
namespace {

constexpr ParallelMode kTp = ParallelMode::kTensor, kSp = ParallelMode::kSequence;

// The threshold rule: TP below it, SP x TP from it; pins stay put.
TEST(ShiftPolicyTest, ChoosesByScheduledTokens) {
  const struct {
    ShiftPolicy::Pin pin;
    int64_t tokens;
    ParallelMode want;
  } cases[] = {
      {ShiftPolicy::Pin::kShift, 1, kTp},      {ShiftPolicy::Pin::kShift, 99, kTp},
      {ShiftPolicy::Pin::kShift, 100, kSp},    {ShiftPolicy::Pin::kShift, 4096, kSp},
      {ShiftPolicy::Pin::kTensor, 4096, kTp},  {ShiftPolicy::Pin::kSequence, 1, kSp},
  };
  for (const auto& c : cases) {
    ShiftPolicy p{c.pin, 100};
    EXPECT_EQ(p.Choose(c.tokens), c.want) << c.tokens;
  }
  EXPECT_FALSE(ParseParallelMode("ulysses").ok());
  EXPECT_EQ(*ParseParallelMode("shift"), ShiftPolicy::Pin::kShift);
}

// A profile: each step takes the mode of the largest measured size not
// above it, whatever the threshold says; below the first size, the first's.
TEST(ShiftPolicyTest, AProfileChoosesTheModeMeasuredFaster) {
  ShiftPolicy p{ShiftPolicy::Pin::kShift, 100, {{2, kSp}, {4, kTp}, {64, kSp}, {512, kTp}, {1024, kSp}}};
  const struct {
    int64_t tokens;
    ParallelMode want;
  } cases[] = {{1, kSp},   {2, kSp},    {3, kSp},    {4, kTp},   {63, kTp},    {64, kSp},
               {100, kSp}, {511, kSp},  {512, kTp},  {1023, kTp}, {1024, kSp}, {1 << 20, kSp}};
  for (const auto& c : cases) EXPECT_EQ(p.Choose(c.tokens), c.want) << c.tokens;
  // Pins ignore it.
  p.pin = ShiftPolicy::Pin::kTensor;
  EXPECT_EQ(p.Choose(2), kTp);
}

// Brute force: Choose against a linear scan of the profile, sizes 1..600.
TEST(ShiftPolicyTest, ProfileLookupMatchesALinearScan) {
  ShiftPolicy p{ShiftPolicy::Pin::kShift, 1, {}};
  for (int64_t n = 3, k = 0; n < 500; n += 1 + n / 3, ++k) p.profile.push_back({n, k % 3 == 0 ? kSp : kTp});
  for (int64_t n = 1; n <= 600; ++n) {
    ParallelMode want = p.profile.front().mode;
    for (const ShiftProfilePoint& q : p.profile)
      if (q.tokens <= n) want = q.mode;
    ASSERT_EQ(p.Choose(n), want) << n;
  }
}

TEST(ShiftPolicyTest, ParsesBenchShiftOutput) {
  // The shape bench_shift prints; other fields are ignored; ties go to TP.
  auto profile = ParseShiftProfile(R"({"ranks": 2, "points": [
      {"tokens": 1, "tp_s": 0.175, "sp_s": 0.096, "shift_s": 0.17, "tp_samples": [0.17]},
      {"tokens": 2, "tp_s": 0.2, "sp_s": 0.2},
      {"tokens": 2048, "tp_s": 40.1, "sp_s": 38.5}]})");
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_EQ(profile->size(), 3u);
  EXPECT_EQ((*profile)[0].tokens, 1);
  EXPECT_EQ((*profile)[0].mode, kSp);
  EXPECT_EQ((*profile)[1].mode, kTp);
  EXPECT_EQ((*profile)[2].tokens, 2048);
  EXPECT_EQ((*profile)[2].mode, kSp);
  EXPECT_EQ(DescribeShiftProfile(*profile), "1:sp 2:tp 2048:sp");
}

TEST(ShiftPolicyTest, RefusesABadProfileNamingThePointAndField) {
  const struct {
    const char* json;
    const char* message;
  } cases[] = {
      {"{", "not JSON"},
      {"[]", "non-empty \"points\""},
      {R"({"points": []})", "non-empty \"points\""},
      {R"({"points": {"tokens": 1}})", "non-empty \"points\""},
      {R"({"points": [1]})", "points[0].tokens missing"},
      {R"({"points": [{"tokens": 1, "tp_s": 1}]})", "points[0].sp_s missing"},
      {R"({"points": [{"tokens": 1, "tp_s": "1", "sp_s": 1}]})", "points[0].tp_s missing or not a number"},
      {R"({"points": [{"tokens": 0, "tp_s": 1, "sp_s": 1}]})", "points[0].tokens = 0, expected positive"},
      {R"({"points": [{"tokens": 1.5, "tp_s": 1, "sp_s": 1}]})", "points[0].tokens is not an integer"},
      {R"({"points": [{"tokens": 1, "tp_s": -1, "sp_s": 1}]})", "points[0].tp_s = -1"},
      {R"({"points": [{"tokens": 18446744073709551615, "tp_s": 1, "sp_s": 1}]})", "points[0].tokens = 18446744073709551615, limit"},
      {R"({"points": [{"tokens": 1073741825, "tp_s": 1, "sp_s": 1}]})", "limit 1073741824"},
      {R"({"points": [{"tokens": 4, "tp_s": 1, "sp_s": 1}, {"tokens": 4, "tp_s": 1, "sp_s": 1}]})",
       "points[1].tokens = 4 after 4, expected ascending"},
  };
  for (const auto& c : cases) {
    auto profile = ParseShiftProfile(c.json);
    ASSERT_FALSE(profile.ok()) << c.json;
    EXPECT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(profile.status().message().find(c.message), std::string::npos) << c.json << ": " << profile.status();
  }
  // Bounded: too many points, too many bytes.
  std::string many = R"({"points": [)";
  for (size_t i = 1; i <= kMaxShiftProfilePoints + 1; ++i)
    many += (i > 1 ? "," : "") + std::string(R"({"tokens": )") + std::to_string(i) + R"(, "tp_s": 1, "sp_s": 2})";
  many += "]}";
  auto too_many = ParseShiftProfile(many);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("limit 4096"), std::string::npos) << too_many.status();
  auto too_big = ParseShiftProfile(std::string(kMaxShiftProfileBytes + 1, ' '));
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("bytes (the limit)"), std::string::npos) << too_big.status();
}

TEST(ShiftPolicyTest, LoadsAFileAndNamesItOnError) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/shift_profile_good.json", bad = dir + "/shift_profile_bad.json";
  std::ofstream(good) << R"({"points": [{"tokens": 1, "tp_s": 2, "sp_s": 1}]})";
  std::ofstream(bad) << R"({"points": [{"tokens": 1}]})";
  auto profile = LoadShiftProfile(good);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->front().mode, kSp);
  auto refused = LoadShiftProfile(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(bad), std::string::npos) << refused.status();
  EXPECT_EQ(LoadShiftProfile(dir + "/absent.json").status().code(), absl::StatusCode::kNotFound);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace floe
