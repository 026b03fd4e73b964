#include "common/tokenizer/incremental_detokenizer.h"

#include <string>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/stop_string_matcher.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/common/tokenizer/test_models.h"

namespace floe {
namespace {

const Tokenizer* LoadLlama() { return testing::SharedTokenizer("tokenizer-llama3_1"); }

TEST(IncrementalDetokenizerTest, EmojiSplitAcrossByteTokensIsHeldBack) {
  auto t = LoadLlama();
  ASSERT_NE(t, nullptr);
  const std::string emoji = "\xF0\x9F\xA6\x80";  // 🦀
  std::vector<int32_t> ids;
  for (char c : emoji) ids.push_back(*t->TokenToId(byte_level::ByteToChars(static_cast<uint8_t>(c))));
  IncrementalDetokenizer detok(t, false);
  EXPECT_EQ(*detok.Add({*t->TokenToId("Hi")}), "Hi");
  EXPECT_EQ(*detok.Add({ids[0]}), "");
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(*detok.Add({ids[1], ids[2]}), "");
  EXPECT_EQ(*detok.Add({ids[3], *t->TokenToId("!")}), emoji + "!");
  EXPECT_EQ(detok.Finish(), "");
}

TEST(IncrementalDetokenizerTest, StreamingEqualsFullDecode) {
  auto t = LoadLlama();
  ASSERT_NE(t, nullptr);
  const std::string text = "Crabs 🦀🦀 and 家族👨‍👩‍👧 say «héllo»<|eot_id|> ok  \n\tmore 中文字符";
  auto ids = *t->Encode(text, true);
  for (bool skip : {false, true}) {
    IncrementalDetokenizer detok(t, skip);
    std::string streamed;
    for (int32_t id : ids) {
      std::string chunk = *detok.Add({id});
      // Every chunk is complete UTF-8 on its own.
      EXPECT_EQ(*t->Decode(*t->Encode(chunk, false), false), chunk);
      streamed += chunk;
    }
    streamed += detok.Finish();
    EXPECT_EQ(streamed, *t->Decode(ids, skip));
  }
}

TEST(IncrementalDetokenizerTest, UnfinishedCharacterAtEndBecomesReplacement) {
  auto t = LoadLlama();
  ASSERT_NE(t, nullptr);
  IncrementalDetokenizer detok(t, false);
  EXPECT_EQ(*detok.Add({*t->TokenToId(byte_level::ByteToChars(0xE4))}), "");
  EXPECT_EQ(detok.Finish(), "\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizerTest, OutOfRangeLeavesStateUnchanged) {
  auto t = LoadLlama();
  ASSERT_NE(t, nullptr);
  IncrementalDetokenizer detok(t, false);
  EXPECT_EQ(*detok.Add({*t->TokenToId(byte_level::ByteToChars(0xE4))}), "");
  EXPECT_EQ(detok.Add({t->vocab_size()}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(detok.pending_bytes(), 1u);
}

TEST(IncrementalDetokenizerTest, FeedsStopStringMatcher) {
  auto t = LoadLlama();
  ASSERT_NE(t, nullptr);
  auto ids = *t->Encode("The answer: 42.\nUser: next question", false);
  IncrementalDetokenizer detok(t, true);
  StopStringMatcher stop({"\nUser:"});
  std::string out;
  bool stopped = false;
  for (int32_t id : ids) {
    auto r = stop.Consume(*detok.Add({id}));
    out += r.text;
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "The answer: 42.");
}

}  // namespace
}  // namespace floe
