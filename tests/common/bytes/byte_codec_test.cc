#include "common/bytes/byte_codec.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace floe {
namespace {

std::string Sample() {
  std::string out;
  AppendPod<uint32_t>(&out, 7);
  AppendPod<int64_t>(&out, -3);
  const std::vector<int32_t> tokens = {1, -2, 300000};
  AppendCounted<uint32_t>(&out, tokens.data(), tokens.size());
  const std::string name = "tenant";
  AppendCounted<uint64_t>(&out, name.data(), name.size());
  return out;
}

TEST(ByteCodecTest, ReadsBackWhatWasAppended) {
  const std::string bytes = Sample();
  ByteReader r(bytes);
  uint32_t a = 0;
  int64_t b = 0;
  std::vector<int32_t> tokens;
  std::string name;
  ASSERT_TRUE(r.Pod(&a, "a"));
  ASSERT_TRUE(r.Pod(&b, "b"));
  ASSERT_TRUE((r.Counted<uint32_t>(&tokens, "tokens")));
  ASSERT_TRUE((r.Counted<uint64_t>(&name, "name")));
  EXPECT_EQ(a, 7u);
  EXPECT_EQ(b, -3);
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, -2, 300000}));
  EXPECT_EQ(name, "tenant");
  EXPECT_TRUE(r.done());
}

// Every prefix fails at some read, says where and what, and stays failed.
TEST(ByteCodecTest, EveryTruncationFailsAndSticks) {
  const std::string bytes = Sample();
  for (size_t n = 0; n < bytes.size(); ++n) {
    ByteReader r(absl::string_view(bytes).substr(0, n));
    uint32_t a = 0;
    int64_t b = 0;
    std::vector<int32_t> tokens;
    std::string name;
    const bool all = r.Pod(&a, "a") && r.Pod(&b, "b") && r.Counted<uint32_t>(&tokens, "tokens") &&
                     r.Counted<uint64_t>(&name, "name");
    EXPECT_FALSE(all) << n;
    EXPECT_FALSE(r.done()) << n;
    EXPECT_NE(r.error().find("truncated at byte"), std::string::npos) << n;
    EXPECT_FALSE(r.Pod(&a, "again")) << n;  // sticky
  }
}

TEST(ByteCodecTest, HugeCountIsRefusedNotAllocated) {
  std::string bytes;
  AppendPod<uint64_t>(&bytes, uint64_t{1} << 60);
  ByteReader r(bytes);
  std::vector<int32_t> v;
  EXPECT_FALSE((r.Counted<uint64_t>(&v, "tokens")));
  EXPECT_TRUE(v.empty());
  EXPECT_NE(r.error().find("reading tokens"), std::string::npos);
}

}  // namespace
}  // namespace floe
