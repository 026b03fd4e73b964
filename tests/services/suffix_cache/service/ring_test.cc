#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/client/suffix_cache_client.h"

namespace floe::suffix_cache {
namespace {

TEST(NamespaceRingTest, StableBalancedAndMinimalMoves) {
  const std::vector<std::string> three = {"a:1", "b:1", "c:1"};
  const std::vector<std::string> four = {"a:1", "b:1", "c:1", "d:1"};
  NamespaceRing r3(three, 64), r3_again(three, 64), r4(four, 64);
  std::map<int, int> load;
  int moved = 0;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    const std::string ns = absl::StrCat("tenant-", i);
    const int a = r3.ReplicaFor(ns);
    EXPECT_EQ(a, r3_again.ReplicaFor(ns));
    ++load[a];
    const int b = r4.ReplicaFor(ns);
    if (b != a) {
      ++moved;
      EXPECT_EQ(b, 3) << "a namespace moved between surviving replicas";
    }
  }
  for (const auto& [replica, count] : load) EXPECT_GT(count, n / 6) << replica;
  EXPECT_LT(moved, n / 2);  // about a quarter moves to the new replica
  EXPECT_EQ(r3.ReplicaFor(""), r3.ReplicaFor("default"));
}

}  // namespace
}  // namespace floe::suffix_cache
