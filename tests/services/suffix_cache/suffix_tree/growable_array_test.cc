#include "services/suffix_cache/suffix_tree/growable_array.h"

#include <cstdint>
#include <utility>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

using Array = GrowableArray<int64_t>;
constexpr size_t kStepElements = Array::kStepBytes / sizeof(int64_t);

// Past kMapBytes the array is a mapping grown by mremap: values survive the
// heap-to-mapping move and every later growth, and the slack stays within
// max(1/16, one step) (doubling, below).
TEST(GrowableArrayTest, KeepsValuesAndBoundsSlackAcrossHeapAndMappedGrowth) {
  Array a;
  EXPECT_EQ(a.size(), 0u);
  const int64_t n = 3'000'000;  // 24 MB: many mremap growths
  for (int64_t i = 0; i < n; ++i) {
    a.emplace_back() = i * 7;
    ASSERT_EQ(a.size(), static_cast<size_t>(i + 1));
    ASSERT_GE(a.capacity(), a.size());
    if (a.size() * sizeof(int64_t) <= Array::kMapBytes) {
      ASSERT_LE(a.capacity(), 2 * a.size() + 16) << i;
    } else {
      ASSERT_LE(a.capacity(), a.size() + a.size() / 16 + 2 * kStepElements) << i;
    }
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], i * 7) << i;
  EXPECT_EQ(a.emplace_back(), 0);  // value-initialised
  EXPECT_EQ(a.MemoryUsage(), a.capacity() * sizeof(int64_t));
}

TEST(GrowableArrayTest, MovesOwnership) {
  for (int64_t n : {int64_t{10}, int64_t{400'000}}) {  // heap, then mapped
    Array a;
    for (int64_t i = 0; i < n; ++i) a.emplace_back() = i;
    Array b(std::move(a));
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(a.capacity(), 0u);
    ASSERT_EQ(b.size(), static_cast<size_t>(n));
    Array c;
    c.emplace_back() = -1;
    c = std::move(b);
    ASSERT_EQ(c.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c[i], i);
    a.emplace_back() = 5;  // a moved-from array is empty and usable
    EXPECT_EQ(a[0], 5);
  }
}

}  // namespace
}  // namespace floe::suffix_cache
