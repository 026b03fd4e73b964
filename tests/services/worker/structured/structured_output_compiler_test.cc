// The worker's structured-output compiler and its cache: every kind
// compiles into a grammar whose matcher takes exactly what the constraint
// allows, with every position's token mask computed at compile time; a
// constraint that does not compile is INVALID_ARGUMENT naming its field, as
// is one that takes longer than the time limit; the cache keeps at most its
// bound (least recently used out first), compares keys in full, and
// concurrent misses on one key compile it once.
#include "services/worker/structured/structured_output_compiler.h"

#include <atomic>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/grammar/matcher.h"
#include "common/grammar/regex_compiler.h"
#include "gtest/gtest.h"
#include "tests/services/worker/structured/structured_test_util.h"

namespace floe {
namespace {

using structured_testing::Choice;
using structured_testing::Gbnf;
using structured_testing::JsonObject;
using structured_testing::JsonSchema;
using structured_testing::Regex;

// Every byte as a token of its own, a few longer tokens, and one special
// token (id 259) the grammar never allows.
std::shared_ptr<const grammar::TokenVocab> SmallVocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "true", "\"city\"", "<eos>", "yes", "maybe"}) tokens.push_back(t);
  std::vector<bool> excluded(tokens.size(), false);
  excluded[259] = true;
  auto vocab = grammar::TokenVocab::FromTokens(std::move(tokens), std::move(excluded));
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  return *vocab;
}

// Whether the compiled grammar takes all of `text` and may end there.
bool Accepts(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}

TEST(StructuredOutputCompilerTest, EveryKindCompilesToWhatItAllowsWithEveryMaskPrecomputed) {
  StructuredOutputCompiler compiler(SmallVocab(), {});
  struct Case {
    floe::v1::StructuredOutput output;
    std::vector<std::string> valid, invalid;
  };
  const std::vector<Case> cases = {
      {JsonSchema(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"),
       {R"({"city": "Oslo"})", R"({"city":""})"},
       {R"({})", R"({"city": 3})", R"({"city": "Oslo", "x": 1})", R"({"city": "Oslo"} )"}},
      // strict: additionalProperties false must be said and every property required.
      {JsonSchema(R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
                      "additionalProperties": false})",
                  true),
       {R"({"a": true})"},
       {R"({"a": 1})"}},
      {JsonObject(), {R"({})", R"({"k": [1, {"x": null}]})"}, {R"([])", R"("s")", "{"}},
      {Regex(R"(\d{2}-[a-c]+)"), {"12-a", "99-abcab"}, {"1-a", "12-", "12-d", "x12-a"}},
      {Choice({"yes", "no", "maybe later"}), {"yes", "no", "maybe later"}, {"ye", "maybe", "yesno", ""}},
      {Gbnf("root ::= \"(\" [0-9]+ (\"+\" [0-9]+)* \")\"\n"), {"(1)", "(12+3+45)"}, {"()", "(1+)", "1"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.output.ShortDebugString());
    auto compiled = compiler.Compile(c.output);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cache_hit);
    const grammar::CompiledGrammarStats stats = compiled->grammar->stats();
    EXPECT_GT(stats.positions, 0u);
    EXPECT_EQ(stats.classified, stats.positions) << "the step loop would classify";
    for (const std::string& text : c.valid) EXPECT_TRUE(Accepts(compiled->grammar, text)) << text;
    for (const std::string& text : c.invalid) EXPECT_FALSE(Accepts(compiled->grammar, text)) << text;
  }
}

TEST(StructuredOutputCompilerTest, ErrorsAreInvalidArgumentNamingTheField) {
  StructuredOutputCompiler compiler(SmallVocab(), {});
  struct Case {
    floe::v1::StructuredOutput output;
    std::string starts_with, mentions;
  };
  const std::vector<Case> cases = {
      {JsonSchema("{\"type\": "), "structured_output.json_schema: ", "not valid JSON"},
      {JsonSchema(R"({"type": "object", "properties": {"x": {"not": {"type": "string"}}}})"),
       "structured_output.json_schema: ", "'not'"},
      // strict needs additionalProperties false.
      {JsonSchema(R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]})", true),
       "structured_output.json_schema: ", "additionalProperties"},
      {Regex("a(?=b)"), "structured_output.regex: ", "not supported"},
      {Gbnf("root ::= \"a\" undefined\n"), "structured_output.grammar: ", "undefined"},
      {Gbnf("root ::= root \"a\" | \"b\"\n"), "structured_output.grammar: ", "left recursion"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.output.ShortDebugString());
    auto compiled = compiler.Compile(c.output);
    ASSERT_FALSE(compiled.ok());
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(compiled.status().message());
    EXPECT_EQ(message.rfind(c.starts_with, 0), 0u) << message;
    EXPECT_NE(message.find(c.mentions), std::string::npos) << message;
  }
  // A failed compile is not cached: the same mistake fails again, compiled again.
  EXPECT_EQ(compiler.cached(), 0u);
}

TEST(StructuredOutputCompilerTest, KeysAreComparedInFullAndChoicesCannotCollide) {
  // ["a:b"] and ["a", "b"] joined naively would be the same text.
  const GrammarKey one = GrammarKeyOf(Choice({"1:a"})), two = GrammarKeyOf(Choice({"1", "a"}));
  EXPECT_FALSE(one == two);
  EXPECT_FALSE(GrammarKeyOf(JsonSchema("{}", true)) == GrammarKeyOf(JsonSchema("{}", false)));
  EXPECT_FALSE(GrammarKeyOf(Regex("a")) == GrammarKeyOf(Gbnf("a")));
  StructuredOutputCompiler compiler(SmallVocab(), {});
  for (const auto& output : {Choice({"1:a"}), Choice({"1", "a"})}) {
    auto compiled = compiler.Compile(output);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cache_hit);
  }
  auto joined = compiler.Compile(Choice({"1:a"}));
  ASSERT_TRUE(joined.ok());
  EXPECT_TRUE(joined->cache_hit);
  EXPECT_TRUE(Accepts(joined->grammar, "1:a"));
  EXPECT_FALSE(Accepts(joined->grammar, "1"));
}

TEST(StructuredOutputCompilerTest, TheCacheKeepsItsBoundLeastRecentlyUsedOutFirst) {
  StructuredOutputCompiler compiler(SmallVocab(), {.cache_size = 2});
  auto compile = [&](const std::string& pattern) {
    auto compiled = compiler.Compile(Regex(pattern));
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    return compiled.ok() ? *compiled : StructuredOutputCompiler::Compiled{};
  };
  const auto a = compile("a+");
  EXPECT_FALSE(a.cache_hit);
  EXPECT_FALSE(compile("b+").cache_hit);
  const auto a_again = compile("a+");  // a is now the most recent
  EXPECT_TRUE(a_again.cache_hit);
  EXPECT_EQ(a_again.grammar, a.grammar);
  EXPECT_FALSE(compile("c+").cache_hit);  // evicts b
  EXPECT_EQ(compiler.cached(), 2u);
  EXPECT_TRUE(compile("a+").cache_hit);
  EXPECT_TRUE(compile("c+").cache_hit);
  EXPECT_FALSE(compile("b+").cache_hit);  // compiled again; evicts a
  EXPECT_FALSE(compile("a+").cache_hit);
  EXPECT_EQ(compiler.cached(), 2u);
  // An evicted grammar lives on where it is held.
  EXPECT_TRUE(Accepts(a.grammar, "aaa"));

  StructuredOutputCompiler none(SmallVocab(), {.cache_size = 0});
  ASSERT_TRUE(none.Compile(Regex("a")).ok());
  auto again = none.Compile(Regex("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->cache_hit);
  EXPECT_EQ(none.cached(), 0u);
}

TEST(GrammarCacheTest, ConcurrentMissesOnOneKeyCompileOnce) {
  GrammarCache cache(8);
  const GrammarKey key{GrammarKey::Kind::kRegex, "x", false};
  auto grammar = grammar::CompileRegex("x");
  ASSERT_TRUE(grammar.ok());
  auto compiled = grammar::CompiledGrammar::Create(*grammar, nullptr);
  ASSERT_TRUE(compiled.ok());
  std::atomic<int> compiles{0};
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  auto slow_compile = [&]() -> absl::StatusOr<GrammarCache::Compiled> {
    ++compiles;
    started.set_value();
    released.wait();
    return *compiled;
  };
  const auto far = GrammarCache::Clock::now() + std::chrono::minutes(5);
  std::thread first([&] {
    GrammarCache::Lookup lookup = cache.Get(key, far, slow_compile);
    EXPECT_FALSE(lookup.hit);
    ASSERT_TRUE(lookup.result.ok());
    EXPECT_EQ(*lookup.result, *compiled);
  });
  started.get_future().wait();
  // The compile is under way: a caller whose deadline has passed gives up
  // at once, the others wait for it.
  GrammarCache::Lookup late = cache.Get(key, GrammarCache::Clock::now(), slow_compile);
  EXPECT_TRUE(absl::IsDeadlineExceeded(late.result.status())) << late.result.status();
  constexpr int kWaiters = 6;
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      GrammarCache::Lookup lookup = cache.Get(key, far, slow_compile);
      EXPECT_TRUE(lookup.hit);
      ASSERT_TRUE(lookup.result.ok()) << lookup.result.status();
      EXPECT_EQ(*lookup.result, *compiled);
    });
  }
  while (cache.waiting() < kWaiters) std::this_thread::yield();
  release.set_value();
  first.join();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(compiles.load(), 1);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.waiting(), 0);
}

TEST(GrammarCacheTest, AFailedCompileIsEveryWaitersAnswerAndNotKept) {
  GrammarCache cache(8);
  const GrammarKey key{GrammarKey::Kind::kGrammar, "bad", false};
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  int compiles = 0;
  auto failing = [&]() -> absl::StatusOr<GrammarCache::Compiled> {
    ++compiles;
    started.set_value();
    released.wait();
    return absl::InvalidArgumentError("structured_output.grammar: no");
  };
  const auto far = GrammarCache::Clock::now() + std::chrono::minutes(5);
  std::thread first([&] { EXPECT_FALSE(cache.Get(key, far, failing).result.ok()); });
  started.get_future().wait();
  std::thread waiter([&] {
    GrammarCache::Lookup lookup = cache.Get(key, far, failing);
    EXPECT_EQ(lookup.result.status().message(), "structured_output.grammar: no");
  });
  while (cache.waiting() < 1) std::this_thread::yield();
  release.set_value();
  first.join();
  waiter.join();
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(cache.size(), 0u);
}

// A large real schema on the real 128k vocabulary: its masks take far
// longer than 1 ms (seconds), so the limit cuts the compile short.
TEST(StructuredOutputCompilerTest, CompilesPastTheTimeLimitAreRefused) {
  auto vocab = structured_testing::Llama3Vocab();
  ASSERT_NE(vocab, nullptr);
  const char* source = std::getenv("FLOE_SOURCE_DIR");
  std::ifstream file(std::string(source ? source : ".") + "/tests/common/grammar/schemas/api_stripe_charge.json");
  ASSERT_TRUE(file.good()) << "set FLOE_SOURCE_DIR to the source tree";
  std::stringstream text;
  text << file.rdbuf();
  const auto doc = nlohmann::ordered_json::parse(text.str());
  const floe::v1::StructuredOutput schema = JsonSchema(doc.at("schema").dump());

  StructuredOutputCompiler hurried(vocab, {.compile_timeout = std::chrono::milliseconds(1)});
  auto compiled = hurried.Compile(schema);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(compiled.status().message(), "structured_output: compiling took longer than 1 ms");
  EXPECT_EQ(hurried.cached(), 0u);

  // A small one compiles within the default limit on the same vocabulary.
  StructuredOutputCompiler patient(vocab, {});
  auto small = patient.Compile(Choice({"yes", "no"}));
  ASSERT_TRUE(small.ok()) << small.status();
  grammar::GrammarMatcher m(small->grammar);
  EXPECT_TRUE(m.AcceptBytes("yes") && m.CanEnd());
}

// The worker's compiler builds the vocabulary on first use: once, however
// many requests arrive together; a vocabulary that cannot be built fails
// every constraint, by name, and the compiler stays usable for the answer.
TEST(StructuredOutputCompilerTest, TheVocabularyIsBuiltOnceOnFirstUse) {
  const auto vocab = structured_testing::Llama3Vocab();
  ASSERT_NE(vocab, nullptr);
  std::atomic<int> loads{0};
  StructuredOutputCompiler lazy(
      [&]() -> absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>> {
        ++loads;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others arrive meanwhile
        return vocab;
      },
      {});
  EXPECT_EQ(loads.load(), 0);
  std::vector<std::future<bool>> results;
  for (int i = 0; i < 4; ++i)
    results.push_back(std::async(std::launch::async, [&] { return lazy.Compile(Choice({"yes", "no"})).ok(); }));
  for (auto& r : results) EXPECT_TRUE(r.get());
  EXPECT_EQ(loads.load(), 1);

  StructuredOutputCompiler broken(
      []() -> absl::StatusOr<std::shared_ptr<const grammar::TokenVocab>> {
        return absl::NotFoundError("tokenizer.json: no such file");
      },
      {});
  for (int i = 0; i < 2; ++i) {
    auto compiled = broken.Compile(Choice({"a"}));
    ASSERT_FALSE(compiled.ok());
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(compiled.status().message().find("tokenizer.json: no such file"), std::string_view::npos);
  }
}

}  // namespace
}  // namespace floe
