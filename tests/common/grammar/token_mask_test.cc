// Token masks against the brute-force oracle: in random reachable states,
// bit t of FillNextTokenMask is set iff a copy of the matcher accepts token
// t's bytes. Over small vocabularies (every token checked) with every cache
// path forced in turn, and over the real Llama 3 vocabulary (the full 128k
// mask computed, a random sample of ids plus the set bits checked).
#include "common/grammar/token_mask.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/matcher.h"
#include "common/grammar/vocab.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/grammar/sample_grammars.h"
#include "tests/common/grammar/string_generator.h"
#include "tests/common/tokenizer/test_models.h"

// Under the sanitizers every byte costs about ten times as much: the
// walks are fewer (and the sampled ids), the checks the same.
#if defined(__SANITIZE_ADDRESS__)
#define FLOE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLOE_TEST_SANITIZED 1
#endif
#endif
#ifdef FLOE_TEST_SANITIZED
constexpr int kWalks = 5;
constexpr int kSampledIds = 500;
#else
constexpr int kWalks = 16;
constexpr int kSampledIds = 2000;
#endif

namespace floe::grammar {
namespace {

using Mask = std::vector<uint32_t>;

Mask MaskOf(GrammarMatcher& m) {
  Mask mask(m.grammar().vocab()->mask_words(), 0xdeadbeef);  // every word must be written
  m.FillNextTokenMask(mask.data());
  return mask;
}

// The oracle matcher keeps no history, so copies are cheap.
MatcherOptions OracleOptions() {
  MatcherOptions o;
  o.max_rollback = 0;
  return o;
}

bool OracleAllows(const GrammarMatcher& oracle, int32_t id) {
  GrammarMatcher copy = oracle;
  return copy.AcceptToken(id);
}

// A small vocabulary for `g`: every single byte, pieces of sentences and
// noise, duplicates of other tokens, two excluded tokens and an empty one.
std::shared_ptr<const TokenVocab> SmallVocab(const Grammar& g, uint32_t seed) {
  testing::StringGenerator gen(g, seed);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  while (tokens.size() < 700) {
    const std::string s = tokens.size() % 3 == 0 ? gen.Next() : gen.Sentence();
    if (s.size() < 2) continue;
    const size_t at = gen.rng()() % (s.size() - 1);
    tokens.push_back(s.substr(at, 2 + gen.rng()() % std::min<size_t>(8, s.size() - at - 1)));
  }
  for (int i = 0; i < 5; ++i) tokens.push_back(tokens[300 + i * 7]);
  std::vector<bool> excluded(tokens.size(), false);
  tokens.push_back("<eos>");
  excluded.push_back(true);
  tokens.push_back(tokens[310]);  // same bytes as an allowed token, but special
  excluded.push_back(true);
  tokens.push_back("");
  excluded.push_back(false);
  auto vocab = TokenVocab::FromTokens(std::move(tokens), std::move(excluded));
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  return *vocab;
}

struct Variant {
  const char* name;
  CompileOptions options;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v(6);
  v[0].name = "default";
  v[1].name = "refine_depth_0";  // every uncertain token checked on the stack
  v[1].options.refine_depth = 0;
  v[2].name = "refine_depth_1";
  v[2].options.refine_depth = 1;
  v[3].name = "no_refinement_cache";
  v[3].options.max_refinements = 0;
  v[4].name = "precompute_all";
  v[4].options.precompute_all = true;
  v[5].name = "no_union_cache";
  v[5].options.max_union_bytes = 0;
  return v;
}

TEST(TokenMaskTest, SmallVocabularyMasksEqualTheOracle) {
  const std::vector<std::pair<const char*, Grammar>> grammars = {
      {"nested_brackets", testing::NestedBrackets()}, {"shared_prefixes", testing::SharedPrefixes()},
      {"nullable_chain", testing::NullableChain()},   {"repetition_bounds", testing::RepetitionBounds()},
      {"bounded_string", testing::BoundedString()},
      {"json_utf8", testing::AnyJson(2)},            {"tool_call", testing::ToolCallJson(2)},
      {"fixed_keys", testing::FixedKeys()}};
  for (const auto& [name, g] : grammars) {
    const auto vocab = SmallVocab(g, 3);
    for (const Variant& variant : Variants()) {
      SCOPED_TRACE(std::string(name) + "/" + variant.name);
      auto compiled = CompiledGrammar::Create(g, vocab, variant.options);
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      std::mt19937 rng(11);
      int set_bits = 0, clear_bits = 0, steps = 0;
      uint64_t stack_checked = 0;
      const bool json = std::string(name).rfind("json", 0) == 0;
      // Where the per-stack check is asserted below, the walks must reach
      // it: the full count even under the sanitizers.
      const int walks = json && variant.options.refine_depth == 0 ? 16 : kWalks;
      for (int walk = 0; walk < walks; ++walk) {
        GrammarMatcher m(*compiled);
        GrammarMatcher oracle(*compiled, OracleOptions());
        for (int step = 0; step < 40; ++step) {
          const Mask mask = MaskOf(m);
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocab->size(); ++id) {
            const bool expected = OracleAllows(oracle, id);
            ASSERT_EQ(TokenBit(mask.data(), id), expected)
                << "walk " << walk << " step " << step << " token " << id << " "
                << ::testing::PrintToString(std::string(vocab->bytes(id)));
            if (expected) allowed.push_back(id);
          }
          for (size_t w = 0; w < mask.size(); ++w) {
            set_bits += __builtin_popcount(mask[w]);
            clear_bits += 32 - __builtin_popcount(mask[w]);
          }
          if (allowed.empty()) break;
          ++steps;
          // Mostly steer away from tokens that complete the input, so walks
          // get deep into nested structures.
          int32_t next = allowed[rng() % allowed.size()];
          for (int tries = 0; tries < 8 && rng() % 10 != 0; ++tries) {
            GrammarMatcher probe = oracle;
            probe.AcceptToken(next);
            if (!probe.CanEnd()) break;
            next = allowed[rng() % allowed.size()];
          }
          ASSERT_TRUE(m.AcceptToken(next));
          ASSERT_TRUE(oracle.AcceptToken(next));
        }
        stack_checked += m.stats().stack_checked_tokens;
      }
      EXPECT_GT(set_bits, 1000);
      EXPECT_GT(clear_bits, 1000);
      EXPECT_GE(steps, walks);  // every walk takes a step; the JSON ones go deep
      if (json || std::string(name) == "tool_call") {
        EXPECT_GT(steps, walks * 6);
      }
      // The per-stack check must really run where the variant forces it.
      if (json && variant.options.refine_depth == 0) {
        EXPECT_GT(stack_checked, 0u);
      }
    }
  }
}

TEST(TokenMaskTest, SpecialAndEmptyTokensAreNeverAllowed) {
  const Grammar g = testing::AnyJson(2);
  const auto vocab = SmallVocab(g, 3);
  auto compiled = CompiledGrammar::Create(g, vocab);
  ASSERT_TRUE(compiled.ok());
  GrammarMatcher m(*compiled);
  ASSERT_TRUE(m.AcceptBytes("\""));  // inside a string: almost everything is allowed
  const Mask mask = MaskOf(m);
  const int32_t n = vocab->size();
  for (int32_t id : {n - 3, n - 2, n - 1}) {
    EXPECT_FALSE(TokenBit(mask.data(), id)) << id;
    EXPECT_FALSE(m.AcceptToken(id)) << id;
  }
  EXPECT_TRUE(TokenBit(mask.data(), 'a'));
  EXPECT_FALSE(m.AcceptToken(-1));
  EXPECT_FALSE(m.AcceptToken(n));
}

TEST(TokenMaskTest, VocabularyTrieCoversEveryAllowedToken) {
  auto vocab = TokenVocab::FromTokens({"ab", "a", "b", "abc", "ab", "", "x", "abd"}, {false, false, false, false,
                                                                                       false, false, true, false});
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  const TokenVocab& v = **vocab;
  EXPECT_EQ(v.sorted_ids(), (std::vector<int32_t>{1, 0, 4, 3, 7, 2}));
  // Each node's subtree holds exactly the tokens extending its path.
  std::vector<std::string> path;
  for (uint32_t i = 0; i < v.trie().size(); ++i) {
    const TokenVocab::TrieNode& node = v.trie()[i];
    path.resize(node.depth - 1);
    path.push_back((path.empty() ? "" : path.back()) + static_cast<char>(node.byte));
    const std::string& prefix = path.back();
    const uint32_t end = node.subtree_end < v.trie().size() ? v.trie()[node.subtree_end].token_begin
                                                             : static_cast<uint32_t>(v.sorted_ids().size());
    for (uint32_t k = 0; k < v.sorted_ids().size(); ++k) {
      const std::string_view b = v.bytes(v.sorted_ids()[k]);
      EXPECT_EQ(k >= node.token_begin && k < end, b.substr(0, prefix.size()) == prefix) << prefix << " " << b;
      EXPECT_EQ(k >= node.token_begin && k < node.own_end, b == prefix) << prefix << " " << b;
    }
  }
  EXPECT_EQ(TokenVocab::FromTokens({"a"}, {false, true}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenVocab::FromTokens({std::string(TokenVocab::kMaxTokenBytes + 1, 'a')}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Masks, CanEnd and ForcedBytes at every depth of a random walk are what
// they were after rolling back to that depth.
TEST(TokenMaskTest, RollbackRestoresMasks) {
  const Grammar g = testing::ToolCallJson(2);  // long documents: deep walks
  const auto vocab = SmallVocab(g, 9);
  auto compiled = CompiledGrammar::Create(g, vocab);
  ASSERT_TRUE(compiled.ok());
  std::mt19937 rng(3);
  MatcherOptions options;
  options.max_rollback = 24;
  options.compact_after_nodes = 64;  // compaction happens between the snapshots too
  struct Seen {
    Mask mask;
    bool can_end;
    std::string forced;
    bool operator==(const Seen& o) const { return mask == o.mask && can_end == o.can_end && forced == o.forced; }
  };
  for (int round = 0; round < 10; ++round) {
    GrammarMatcher m(*compiled, options);
    const auto record = [&] { return Seen{MaskOf(m), m.CanEnd(), m.ForcedBytes(16)}; };
    // seen[i]: the state after i accepted tokens.
    std::vector<Seen> seen = {record()};
    const auto step = [&] {
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id)
        if (TokenBit(seen.back().mask.data(), id)) allowed.push_back(id);
      if (allowed.empty()) return false;
      EXPECT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
      seen.push_back(record());
      return true;
    };
    for (int i = 0; i < 30 && step(); ++i) {
    }
    for (int k = 0; k < 8 && m.rollback_available() > 0; ++k) {
      const int steps = 1 + static_cast<int>(rng() % m.rollback_available());
      ASSERT_TRUE(m.Rollback(steps).ok());
      seen.resize(seen.size() - steps);
      ASSERT_TRUE(record() == seen.back()) << "round " << round << " rollback " << steps;
      step();
    }
  }
}

// Lazily filled caches under concurrent use give every thread the masks an
// eagerly compiled grammar gives.
TEST(TokenMaskTest, SharedGrammarAcrossThreads) {
  const Grammar g = testing::ToolCallJson(4);
  const auto vocab = SmallVocab(g, 21);
  CompileOptions eager;
  eager.precompute_all = true;
  auto reference = CompiledGrammar::Create(g, vocab, eager);
  auto shared = CompiledGrammar::Create(g, vocab);
  ASSERT_TRUE(reference.ok() && shared.ok());
  std::vector<std::string> docs;
  testing::StringGenerator gen(g, 4);
  for (int i = 0; i < 8; ++i) docs.push_back(gen.Sentence());
  std::vector<std::vector<Mask>> expected(docs.size());
  for (size_t d = 0; d < docs.size(); ++d) {
    GrammarMatcher m(*reference);
    for (char c : docs[d]) {
      expected[d].push_back(MaskOf(m));
      ASSERT_TRUE(m.AcceptByte(static_cast<uint8_t>(c)));
    }
  }
  std::vector<int> mismatches(docs.size(), 0);
  std::vector<std::thread> threads;
  for (size_t d = 0; d < docs.size(); ++d)
    threads.emplace_back([&, d] {
      GrammarMatcher m(*shared);
      for (size_t i = 0; i < docs[d].size(); ++i) {
        mismatches[d] += MaskOf(m) != expected[d][i];
        m.AcceptByte(static_cast<uint8_t>(docs[d][i]));
      }
    });
  for (auto& t : threads) t.join();
  for (size_t d = 0; d < docs.size(); ++d) EXPECT_EQ(mismatches[d], 0) << "doc " << d;
}

// The real vocabulary: walk each valid document token by token (as the
// tokenizer splits it), branching off into short random walks; at every
// state compare the full 128k mask with the oracle on ~2000 random ids, the
// next token, and a sample of the allowed ones.
class Llama3MaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const Tokenizer* t = floe::testing::SharedTokenizer("tokenizer-llama3_1");
    if (t == nullptr) return;
    tokenizer_ = t;
    auto vocab = TokenVocab::FromTokenizer(*t);
    ASSERT_TRUE(vocab.ok()) << vocab.status();
    vocab_ = *vocab;
  }
  static const Tokenizer* tokenizer_;
  static std::shared_ptr<const TokenVocab> vocab_;

  void CheckDocuments(const Grammar& g, const std::vector<std::string>& docs, CompileOptions options) {
    ASSERT_NE(vocab_, nullptr) << floe::testing::MissingModelsMessage();
    auto compiled = CompiledGrammar::Create(g, vocab_, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    std::mt19937 rng(29);
    std::vector<int32_t> sample;
    for (int i = 0; i < kSampledIds; ++i) sample.push_back(static_cast<int32_t>(rng() % vocab_->size()));
    int checked_allowed = 0, states = 0;
    const auto check = [&](GrammarMatcher& m, const GrammarMatcher& oracle, int32_t must_allow,
                           std::vector<int32_t>* allowed_in_sample) {
      const Mask mask = MaskOf(m);
      ++states;
      std::vector<int32_t> ids = sample;
      std::vector<int32_t> set;
      for (int32_t id = 0; id < vocab_->size(); ++id)
        if (TokenBit(mask.data(), id)) set.push_back(id);
      for (int k = 0; k < 200 && !set.empty(); ++k) ids.push_back(set[rng() % set.size()]);
      if (must_allow >= 0) {
        ids.push_back(must_allow);
        EXPECT_TRUE(TokenBit(mask.data(), must_allow)) << "the document's next token is masked out";
      }
      for (int32_t id : ids) {
        const bool expected = OracleAllows(oracle, id);
        ASSERT_EQ(TokenBit(mask.data(), id), expected)
            << "token " << id << " " << ::testing::PrintToString(std::string(vocab_->bytes(id)));
        checked_allowed += expected;
        if (expected && allowed_in_sample != nullptr) allowed_in_sample->push_back(id);
      }
      // The special tokens (EOS included) are never in the mask.
      for (int32_t eos : tokenizer_->eos_ids()) EXPECT_FALSE(TokenBit(mask.data(), eos));
    };
    for (const std::string& doc : docs) {
      auto ids = tokenizer_->Encode(doc, /*add_special_tokens=*/false);
      ASSERT_TRUE(ids.ok()) << ids.status();
      GrammarMatcher m(*compiled);
      GrammarMatcher oracle(*compiled, OracleOptions());
      for (size_t i = 0; i < ids->size(); ++i) {
        std::vector<int32_t> allowed;
        ASSERT_NO_FATAL_FAILURE(check(m, oracle, (*ids)[i], &allowed));
        if (i % 4 == 1 && !allowed.empty()) {
          // A detour of random allowed tokens, then back by rollback.
          GrammarMatcher detour_oracle = oracle;
          int taken = 0;
          for (int k = 0; k < 4 && !allowed.empty(); ++k) {
            const int32_t id = allowed[rng() % allowed.size()];
            ASSERT_TRUE(m.AcceptToken(id));
            ASSERT_TRUE(detour_oracle.AcceptToken(id));
            ++taken;
            allowed.clear();
            ASSERT_NO_FATAL_FAILURE(check(m, detour_oracle, -1, &allowed));
          }
          ASSERT_TRUE(m.Rollback(taken).ok());
        }
        ASSERT_TRUE(m.AcceptToken((*ids)[i])) << "token " << i << " of " << doc;
        ASSERT_TRUE(oracle.AcceptToken((*ids)[i]));
      }
      EXPECT_TRUE(m.CanEnd()) << doc;
    }
    EXPECT_GT(checked_allowed, 500);
    EXPECT_GT(states, 50);
  }
};

const Tokenizer* Llama3MaskTest::tokenizer_ = nullptr;
std::shared_ptr<const TokenVocab> Llama3MaskTest::vocab_;

TEST_F(Llama3MaskTest, AnyJsonMasksEqualTheOracle) {
  CheckDocuments(testing::AnyJson(16), testing::AnyJsonDocuments(), {});
}

TEST_F(Llama3MaskTest, ToolCallMasksEqualTheOracle) {
  CheckDocuments(testing::ToolCallJson(16), testing::ToolCallDocuments(), {});
}

// Grammars from the JSON Schema front end (bounded strings, formats,
// unions, recursion), with each corpus file's valid documents.
TEST_F(Llama3MaskTest, SchemaCorpusMasksEqualTheOracle) {
  for (const char* name : {"bounded_strings", "api_stripe_charge", "oneof_payment", "recursive_tree"}) {
    SCOPED_TRACE(name);
    const std::string path = std::string(std::getenv("FLOE_SOURCE_DIR") ? std::getenv("FLOE_SOURCE_DIR") : ".") +
                             "/tests/common/grammar/schemas/" + name + ".json";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    const auto file = nlohmann::ordered_json::parse(in);
    auto g = CompileJsonSchema(file["schema"]);
    ASSERT_TRUE(g.ok()) << g.status();
    std::vector<std::string> docs;
    for (const auto& doc : file["valid"]) docs.push_back(doc.dump());
    CheckDocuments(*g, docs, {});
  }
}

TEST_F(Llama3MaskTest, ShallowRefinementStillExact) {
  CompileOptions shallow;
  shallow.refine_depth = 1;  // deep nesting leaves uncertain tokens to the per-stack check
  CheckDocuments(testing::AnyJson(16), {testing::AnyJsonDocuments()[2]}, shallow);
}

}  // namespace
}  // namespace floe::grammar
