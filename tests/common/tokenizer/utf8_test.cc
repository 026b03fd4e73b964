#include "common/tokenizer/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace floe::utf8 {
namespace {

TEST(Utf8Test, FindInvalid) {
  EXPECT_EQ(FindInvalid("plain ascii text, long enough for the fast path"), 47u);
  EXPECT_EQ(FindInvalid("héllo 😀 中文"), std::string("héllo 😀 中文").size());
  EXPECT_EQ(FindInvalid("abc\xC3"), 3u);           // Truncated.
  EXPECT_EQ(FindInvalid("abcdefghij\xC0\xAF"), 10u);  // Overlong.
  EXPECT_EQ(FindInvalid("\xED\xA0\x80"), 0u);      // Surrogate.
  EXPECT_EQ(FindInvalid("ok\xF4\x90\x80\x80"), 2u);  // Above U+10FFFF.
  EXPECT_EQ(FindInvalid("x\xFF"), 1u);
}

TEST(Utf8Test, CompletePrefixLength) {
  const std::string emoji = "😀";  // F0 9F 98 80
  EXPECT_EQ(CompletePrefixLength("ab" + emoji.substr(0, 1)), 2u);
  EXPECT_EQ(CompletePrefixLength("ab" + emoji.substr(0, 3)), 2u);
  EXPECT_EQ(CompletePrefixLength("ab" + emoji), 6u);
  EXPECT_EQ(CompletePrefixLength("ab\xFF"), 3u);  // Invalid, not incomplete.
  EXPECT_EQ(CompletePrefixLength(""), 0u);
}

TEST(Utf8Test, AppendLossyReplacesMaximalSubparts) {
  std::string out;
  AppendLossy("a\xF0\x9F\x98" "b\xFF" "c", &out);
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c");
}

}  // namespace
}  // namespace floe::utf8
