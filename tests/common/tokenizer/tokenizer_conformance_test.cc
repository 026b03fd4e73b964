// Conformance against Hugging Face tokenizers (the Rust library, through its
// native npm build): gen_conformance.js encodes ~1.1 MB of mixed text with the
// real Llama 3.1 and Qwen3 files (and a GPT-2-style pre-tokenizer variant of
// Llama 3.1); every document must give identical ids here, with and without
// special tokens, and decode back to the text (NFC for Qwen) as HF decodes it.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/tokenizer/test_models.h"

namespace floe {
namespace {

using Json = nlohmann::json;

std::string Describe(const Tokenizer& t, const std::vector<int32_t>& ids, size_t at) {
  std::ostringstream out;
  const size_t begin = at > 3 ? at - 3 : 0;
  for (size_t i = begin; i < ids.size() && i < at + 4; ++i) {
    out << (i == at ? " >>" : " ") << ids[i] << "'" << t.TokenBytes(ids[i]) << "'";
  }
  return out.str();
}

// Returns false (after reporting) on the first difference.
bool ExpectSameIds(const Tokenizer& t, const std::string& what, const std::vector<int32_t>& expected,
                   const std::vector<int32_t>& actual) {
  if (expected == actual) return true;
  size_t at = 0;
  while (at < expected.size() && at < actual.size() && expected[at] == actual[at]) ++at;
  ADD_FAILURE() << what << ": first difference at token " << at << " (sizes " << expected.size() << " vs "
                << actual.size() << ")\n  HF:   " << Describe(t, expected, at)
                << "\n  ours: " << Describe(t, actual, at);
  return false;
}

TEST(TokenizerConformanceTest, MatchesHuggingFaceOnMixedCorpus) {
  const std::string modules = testing::NodeModulesDir();
  ASSERT_TRUE(std::filesystem::exists(modules + "/@anush008/tokenizers"))
      << testing::MissingModelsMessage() << " (Hugging Face tokenizers npm package missing)";
  const char* source = std::getenv("FLOE_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "FLOE_SOURCE_DIR must point at the source tree (CTest sets it)";
  const std::string script = std::string(source) + "/tests/common/tokenizer/gen_conformance.js";
  const std::string out_dir = (std::filesystem::path(::testing::TempDir()) / "tokenizer_conformance").string();
  const std::string command = "node '" + script + "' '" + out_dir + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << "reference generator failed: " << command;

  std::ifstream in(out_dir + "/expected.json");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const Json expected = Json::parse(buffer.str(), nullptr, false);
  ASSERT_FALSE(expected.is_discarded()) << "malformed reference file in " << out_dir;
  const auto docs = expected["docs"].get<std::vector<std::string>>();
  size_t total_bytes = 0;
  for (const auto& d : docs) total_bytes += d.size();
  ASSERT_GE(total_bytes, 1u << 20);

  const std::pair<std::string, std::string> tokenizers[] = {{"llama", testing::ModelDir("tokenizer-llama3_1")},
                                                             {"qwen", testing::ModelDir("tokenizer-qwen3")},
                                                             {"gpt2style", out_dir + "/gpt2style"},
                                                             {"spstyle", out_dir + "/spstyle"},
                                                             {"metaspacestyle", out_dir + "/metaspacestyle"}};
  for (const auto& [name, path] : tokenizers) {
    auto loaded = Tokenizer::Load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const Tokenizer& t = **loaded;
    const Json& ref = expected[name];
    int failures = 0;
    const size_t count = ref["without"].size();
    ASSERT_TRUE(name.ends_with("style") ? count > 0 : count == docs.size()) << name;
    for (size_t i = 0; i < count && failures < 5; ++i) {
      const std::string what = name + " doc " + std::to_string(i);
      for (bool special : {false, true}) {
        auto ids = t.Encode(docs[i], special);
        ASSERT_TRUE(ids.ok()) << what << ": " << ids.status();
        const auto want = ref[special ? "with" : "without"][i].get<std::vector<int32_t>>();
        if (!ExpectSameIds(t, what + (special ? " (add_special_tokens)" : ""), want, *ids)) ++failures;
        if (!special) {
          auto text = t.Decode(*ids, false);
          ASSERT_TRUE(text.ok()) << what << ": " << text.status();
          const std::string hf_decoded = ref["decoded"][i].get<std::string>();
          EXPECT_EQ(*text, hf_decoded) << what << ": decode differs from Hugging Face";
          // Llama has no normalizer, so decoding gives the text back exactly.
          if (name == "llama") EXPECT_EQ(*text, docs[i]) << what << ": decode(encode(x)) != x";
          if (i < 20) {
            // Streaming, one token at a time, gives the same text.
            IncrementalDetokenizer detokenizer(&t, false);
            std::string streamed;
            for (int32_t id : *ids) streamed += *detokenizer.Add({id});
            streamed += detokenizer.Finish();
            EXPECT_EQ(streamed, *text) << what << ": streamed decode differs";
          }
        }
      }
    }
    EXPECT_EQ(failures, 0) << name << ": stopped after 5 differing documents";
  }
}

}  // namespace
}  // namespace floe
