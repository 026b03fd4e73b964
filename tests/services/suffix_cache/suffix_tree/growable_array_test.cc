#include "services/suffix_cache/suffix_tree/growable_array.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

TEST(GrowableArrayTest, KeepsValuesAndAQuarterOfSlackAtMost) {
  GrowableArray<int64_t> a;
  EXPECT_EQ(a.size(), 0u);
  for (int64_t i = 0; i < 100000; ++i) {
    a.emplace_back() = i * 7;
    ASSERT_EQ(a.size(), static_cast<size_t>(i + 1));
    ASSERT_GE(a.capacity(), a.size());
    ASSERT_LE(a.capacity(), a.size() + a.size() / 4 + 16) << i;
  }
  for (int64_t i = 0; i < 100000; ++i) ASSERT_EQ(a[i], i * 7) << i;
  EXPECT_EQ(a.emplace_back(), 0);  // value-initialised
  EXPECT_EQ(a.MemoryUsage(), a.capacity() * sizeof(int64_t));
}

}  // namespace
}  // namespace floe::suffix_cache
