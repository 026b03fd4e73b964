#include "common/tokenizer/stop_string_matcher.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace floe {
namespace {

TEST(StopStringMatcherTest, PassesTextThatCannotStartAStop) {
  StopStringMatcher m({"STOP"});
  auto r = m.Consume("hello world");
  EXPECT_EQ(r.text, "hello world");
  EXPECT_FALSE(r.stopped);
  r = m.Consume(" ST");
  EXPECT_EQ(r.text, " ");  // "ST" may begin "STOP".
  EXPECT_EQ(m.held(), "ST");
  r = m.Consume("ART");
  EXPECT_EQ(r.text, "START");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, StopSplitAcrossThreeChunks) {
  StopStringMatcher m({"<|end|>"});
  std::string emitted;
  auto r = m.Consume("answer is 42<|");
  emitted += r.text;
  EXPECT_FALSE(r.stopped);
  r = m.Consume("en");
  emitted += r.text;
  EXPECT_FALSE(r.stopped);
  r = m.Consume("d|> trailing");
  emitted += r.text;
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "<|end|>");
  EXPECT_EQ(emitted, "answer is 42");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Consume("more").text, "");
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher m({"\n\nUser:"});
  std::string emitted;
  emitted += m.Consume("line\n").text;
  emitted += m.Consume("\nUs").text;
  EXPECT_EQ(emitted, "line");
  emitted += m.Consume("ually fine").text;
  EXPECT_EQ(emitted, "line\n\nUsually fine");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, EarliestOfSeveralStops) {
  StopStringMatcher m({"world", "lo w", ""});
  auto r = m.Consume("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "lo w");
  EXPECT_EQ(r.text, "hel");
}

// Feeds `chunks`; returns everything emitted, and whether a stop string matched.
std::pair<std::string, bool> Feed(StopStringMatcher& m, const std::vector<std::string>& chunks) {
  std::string emitted;
  bool stopped = false;
  for (const auto& chunk : chunks) {
    auto r = m.Consume(chunk);
    emitted += r.text;
    stopped = stopped || r.stopped;
  }
  return {emitted, stopped};
}

TEST(StopStringMatcherTest, OverlappingPrefixesHoldLongestCandidate) {
  StopStringMatcher m({"aab"});
  // "aaa": only the last "aa" can still start "aab".
  EXPECT_EQ(Feed(m, {"xa", "a", "a"}), std::make_pair(std::string("xa"), false));
  EXPECT_EQ(Feed(m, {"b!"}), std::make_pair(std::string(""), true));
}

TEST(StopStringMatcherTest, MultibyteStopString) {
  StopStringMatcher m({"終わり"});
  EXPECT_EQ(Feed(m, {"これで終"}), std::make_pair(std::string("これで"), false));
  EXPECT_EQ(Feed(m, {"わり です"}), std::make_pair(std::string(""), true));
}

TEST(StopStringMatcherTest, FlushReturnsHeldTextWithoutStop) {
  StopStringMatcher m({"###"});
  EXPECT_EQ(m.Consume("end ##").text, "end ");
  EXPECT_EQ(m.Flush(), "##");
}

}  // namespace
}  // namespace floe
