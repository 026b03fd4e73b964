#include "services/suffix_cache/suffix_tree/chunked_array.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace floe::suffix_cache {
namespace {

TEST(ChunkedArrayTest, KeepsValuesAndAtMostOneChunkOfSlack) {
  ChunkedArray<int64_t, 6> a;  // chunks of 64
  EXPECT_EQ(a.size(), 0u);
  for (int64_t i = 0; i < 1000; ++i) {
    a.emplace_back() = i * 7;
    ASSERT_EQ(a.size(), static_cast<size_t>(i + 1));
    ASSERT_GE(a.capacity(), a.size());
    // Doubling below one chunk, then whole chunks only.
    ASSERT_LT(a.capacity() - a.size(), a.size() < 64 ? a.size() + 16 : 64u);
  }
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(a[i], i * 7) << i;
  // Past the first chunk, growing never moves elements.
  int64_t* p = &a[100];
  for (int i = 0; i < 500; ++i) a.emplace_back();
  EXPECT_EQ(p, &a[100]);
  EXPECT_EQ(a[1000], 0);  // value-initialised
}

}  // namespace
}  // namespace floe::suffix_cache
