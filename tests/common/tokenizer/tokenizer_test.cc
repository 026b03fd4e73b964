#include "common/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/tokenizer/test_models.h"

namespace floe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RealTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    llama_ = testing::SharedTokenizer("tokenizer-llama3_1");
    qwen_ = testing::SharedTokenizer("tokenizer-qwen3");
    ASSERT_NE(llama_, nullptr);
    ASSERT_NE(qwen_, nullptr);
  }
  const Tokenizer* llama_ = nullptr;
  const Tokenizer* qwen_ = nullptr;
};

TEST(TokenizerTest, LoadsFromFilePathToo) {
  auto t = Tokenizer::Load(testing::ModelDir("tokenizer-qwen3") + "/tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 151669);
  EXPECT_THAT((*t)->eos_ids(), ElementsAre(151645));  // tokenizer_config.json beside it is read.
}

TEST_F(RealTokenizerTest, InvalidUtf8IsRejectedWithOffset) {
  auto ids = llama_->Encode("ab\xFF" "cd", false);
  ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("UTF-8"));
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("byte offset 2"));
  EXPECT_EQ(qwen_->Encode("\xE4\xB8", false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RealTokenizerTest, DecodeOutOfRange) {
  EXPECT_EQ(llama_->vocab_size(), 128256);
  for (int32_t bad : {128256, -1, 1 << 30}) {
    auto text = llama_->Decode({9906, bad}, false);
    ASSERT_EQ(text.status().code(), absl::StatusCode::kOutOfRange) << bad;
    EXPECT_THAT(std::string(text.status().message()), HasSubstr(std::to_string(bad)));
    EXPECT_THAT(std::string(text.status().message()), HasSubstr("128256"));
  }
}

TEST_F(RealTokenizerTest, AddSpecialTokensFollowsPostProcessor) {
  EXPECT_THAT(*llama_->Encode("Hello", true), ElementsAre(128000, 9906));
  EXPECT_THAT(*llama_->Encode("Hello", false), ElementsAre(9906));
  EXPECT_THAT(*llama_->Encode("", true), ElementsAre(128000));
  EXPECT_TRUE(llama_->Encode("", false)->empty());
  // Qwen3 has no template: add_special_tokens changes nothing.
  EXPECT_EQ(*qwen_->Encode("Hello world", true), *qwen_->Encode("Hello world", false));
}

TEST_F(RealTokenizerTest, AddedTokensAreSplitOutOfText) {
  // Reference ids from Hugging Face tokenizers.
  EXPECT_THAT(*llama_->Encode("Hello <|eot_id|>world's  \n\n  x", true),
              ElementsAre(128000, 9906, 220, 128009, 14957, 596, 19124, 220, 865));
  auto qwen = *qwen_->Encode("<|im_start|>user<think>x</think><|im_end|>", false);
  EXPECT_EQ(qwen.front(), 151644);
  EXPECT_EQ(qwen.back(), 151645);
  EXPECT_NE(std::find(qwen.begin(), qwen.end(), 151667), qwen.end());
}

TEST_F(RealTokenizerTest, BosEosAndSpecialFlags) {
  EXPECT_EQ(llama_->bos_id(), 128000);
  EXPECT_THAT(llama_->eos_ids(), ElementsAre(128009));
  EXPECT_EQ(qwen_->bos_id(), std::nullopt);
  EXPECT_THAT(qwen_->eos_ids(), ElementsAre(151645));
  EXPECT_TRUE(llama_->IsSpecial(128009));
  EXPECT_FALSE(llama_->IsSpecial(9906));
  EXPECT_FALSE(qwen_->IsSpecial(151667));  // <think> is added but not special.
  EXPECT_TRUE(qwen_->IsSpecial(151643));
}

TEST_F(RealTokenizerTest, DecodeAndTokenLookup) {
  EXPECT_EQ(*llama_->Decode({128000, 9906, 220, 128009}, true), "Hello ");
  EXPECT_EQ(*llama_->Decode({128000, 9906, 220, 128009}, false), "<|begin_of_text|>Hello <|eot_id|>");
  EXPECT_EQ(*qwen_->Decode({151667}, true), "<think>");  // Not special: kept.
  EXPECT_EQ(llama_->TokenBytes(220), " ");
  EXPECT_EQ(llama_->TokenBytes(128009), "<|eot_id|>");
  EXPECT_EQ(llama_->TokenToId("Ġ"), 220);
  EXPECT_EQ(llama_->TokenToId("<|eot_id|>"), 128009);
  EXPECT_EQ(llama_->TokenToId("no such token at all"), std::nullopt);
  // A lone byte of a multibyte character decodes to U+FFFD.
  const int32_t lead = *llama_->TokenToId(byte_level::ByteToChars(0xF0));
  EXPECT_EQ(*llama_->Decode({9906, lead}, false), "Hello\xEF\xBF\xBD");
}

TEST_F(RealTokenizerTest, QwenNormalizesToNfc) {
  // "é" as e + combining acute encodes like the precomposed form.
  EXPECT_EQ(*qwen_->Encode("caf\x65\xCC\x81", false), *qwen_->Encode("caf\xC3\xA9", false));
  EXPECT_NE(*llama_->Encode("caf\x65\xCC\x81", false), *llama_->Encode("caf\xC3\xA9", false));
}

TEST_F(RealTokenizerTest, ConcurrentEncodesAgree) {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "Doc " + std::to_string(i) + ": the quick brown 狐狸 jumps over 🦀 lazy dogs'S tails\n\n";
  }
  const std::vector<int32_t> expected = *qwen_->Encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 5; ++r) ok[t] += *qwen_->Encode(text, true) == expected;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 5));
}

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(TokenizerTest, TinyTokenizerWithPairMergesAndConfigs) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tiny_tokenizer";
  std::filesystem::create_directories(dir);
  // Vocab: all 256 byte tokens, then merges "a b" -> "ab", "ab c" -> "abc".
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    std::string chars = byte_level::BytesToChars(std::string(1, static_cast<char>(b)));
    if (chars == "\"" || chars == "\\") chars = "\\" + chars;
    vocab += "\"" + chars + "\": " + std::to_string(b) + ",";
  }
  vocab += "\"ab\": 256, \"abc\": 257}";
  WriteFile(dir / "tokenizer.json", R"({
    "added_tokens": [
      {"id": 258, "content": "<s>", "special": true},
      {"id": 259, "content": "</s>", "special": true},
      {"id": 260, "content": "[X]", "special": false, "lstrip": true, "rstrip": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": [["a", "b"], ["ab", "c"]]}})");
  WriteFile(dir / "tokenizer_config.json",
            R"({"add_bos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"}})");
  WriteFile(dir / "generation_config.json", R"({"eos_token_id": [259, 260]})");
  auto tokenizer = Tokenizer::Load(dir.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;
  EXPECT_EQ(t.vocab_size(), 261);
  EXPECT_EQ(t.bos_id(), 258);
  EXPECT_THAT(t.eos_ids(), ElementsAre(259, 260));
  EXPECT_THAT(*t.Encode("abc", true), ElementsAre(258, 257));
  EXPECT_THAT(*t.Encode("abab", false), ElementsAre(256, 256));
  // lstrip/rstrip: the spaces around [X] belong to it.
  EXPECT_THAT(*t.Encode("ab  [X]  c", false), ElementsAre(256, 260, 'c'));
  EXPECT_EQ(*t.Decode({258, 257, 259}, true), "abc");
  EXPECT_EQ(Tokenizer::Load((dir / "missing").string()).status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenizerTest, LoadErrorsNameTheProblem) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "bad_tokenizers";
  std::filesystem::create_directories(dir);
  const auto load = [&](const std::string& name, const std::string& json) {
    WriteFile(dir / name, json);
    return Tokenizer::Load((dir / name).string()).status();
  };
  absl::Status s = load("truncated.json", R"({"model": {"vocab": {"a": 0)");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("malformed JSON"));
  s = load("bad_merge.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "ab"]}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.merges[1]"));
  s = load("bad_id.json", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.vocab"));
  s = load("unknown_merge.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "q"]]}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.merges[0]"));
  s = load("wordpiece.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("WordPiece"));
}

// SentencePiece-style BPE with byte fallback and fused unknown characters.
// Expected values come from Hugging Face tokenizers on the same file.
TEST(TokenizerTest, SentencePieceStyleUnknownAndByteFallback) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tiny_sp_tokenizer";
  std::filesystem::create_directories(dir);
  WriteFile(dir / "tokenizer.json", R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null, "post_processor": null,
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
              "vocab": {"<unk>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4, "<0x78>": 5}, "merges": ["▁ a"]}})");
  auto tokenizer = Tokenizer::Load(dir.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;
  // "x" falls back to its byte token; "yzy" has none and fuses into one <unk>.
  EXPECT_THAT(*t.Encode("a xyzy b", true), ElementsAre(4, 1, 5, 0, 1, 3));
  EXPECT_EQ(*t.Decode({4, 1, 5, 0, 1, 3}, false), "a x<unk> b");
  EXPECT_EQ(*t.Decode({1, 1, 2}, false), " a");  // Only the first space is stripped.
  EXPECT_EQ(t.TokenToId("▁a"), 4);
  EXPECT_EQ(t.TokenBytes(5), "x");
  IncrementalDetokenizer detokenizer(&t, false);
  EXPECT_EQ(*detokenizer.Add({1}), "");
  EXPECT_EQ(*detokenizer.Add({1}), " ");
  EXPECT_EQ(*detokenizer.Add({2}), "a");
}

}  // namespace
}  // namespace floe
