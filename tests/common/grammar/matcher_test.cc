// GrammarMatcher at the byte level, against the independent Earley oracle
// (grammar_oracle.h): every prefix of random strings (sentences, mutations,
// noise) is accepted iff the oracle says it can be continued, and CanEnd()
// iff the oracle accepts it; plus rollback, forced bytes, compaction and
// compile errors.
#include "common/grammar/matcher.h"

#include <algorithm>
#include <climits>
#include <random>
#include <string>
#include <vector>

#include "common/grammar/program.h"
#include "common/grammar/token_mask.h"
#include "gtest/gtest.h"
#include "tests/common/grammar/grammar_oracle.h"
#include "tests/common/grammar/sample_grammars.h"
#include "tests/common/grammar/string_generator.h"

namespace floe::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> Compile(const Grammar& g) {
  auto compiled = CompiledGrammar::Create(g, nullptr);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

struct Named {
  const char* name;
  Grammar grammar;
};

std::vector<Named> SmallGrammars() {
  return {{"nested_brackets", testing::NestedBrackets()},
          {"shared_prefixes", testing::SharedPrefixes()},
          {"nullable_chain", testing::NullableChain()},
          {"repetition_bounds", testing::RepetitionBounds()},
          {"bounded_string", testing::BoundedString()},
          {"dead_branches", testing::WithDeadBranches()},
          {"json_ascii", testing::AnyJson(2, /*ascii_only=*/true)},
          {"json_utf8", testing::AnyJson(1)},
          {"fixed_keys", testing::FixedKeys()}};
}

TEST(GrammarMatcherTest, PrefixesAndSentencesAgreeWithOracle) {
  for (const Named& named : SmallGrammars()) {
    SCOPED_TRACE(named.name);
    const Grammar& g = named.grammar;
    auto compiled = Compile(g);
    ASSERT_NE(compiled, nullptr);
    testing::StringGenerator gen(g, /*seed=*/17);
    int full_accepts = 0, rejects = 0, prefixes = 0;
    for (int i = 0; i < 1000; ++i) {
      const std::string s = gen.Next();
      SCOPED_TRACE(::testing::PrintToString(s));
      GrammarMatcher byte_by_byte(compiled);
      // Prefixes are closed downwards for both, so the first rejected byte
      // n is fully checked by two oracle calls: s[0, n) can be continued,
      // s[0, n] cannot. One random earlier prefix checks CanEnd mid-way.
      const size_t probe = gen.rng()() % (s.size() + 1);
      size_t n = 0;
      for (; n < s.size(); ++n) {
        if (n == probe) {
          EXPECT_EQ(byte_by_byte.CanEnd(), testing::OracleAccepts(g, s.substr(0, n))) << "prefix of " << n;
        }
        if (!byte_by_byte.AcceptByte(static_cast<uint8_t>(s[n]))) break;
      }
      prefixes += static_cast<int>(n);
      EXPECT_TRUE(testing::OracleIsPrefix(g, s.substr(0, n))) << "matcher accepted " << n << " bytes";
      if (n < s.size()) {
        EXPECT_FALSE(testing::OracleIsPrefix(g, s.substr(0, n + 1))) << "matcher rejected byte " << n;
        ++rejects;
      } else {
        EXPECT_EQ(byte_by_byte.CanEnd(), testing::OracleAccepts(g, s));
        full_accepts += byte_by_byte.CanEnd();
      }
      EXPECT_FALSE(byte_by_byte.IsDead());
      // All or nothing: a rejected run leaves the state as it was.
      GrammarMatcher whole(compiled);
      const bool can_end_before = whole.CanEnd();
      const size_t stacks_before = whole.stack_count();
      EXPECT_EQ(whole.AcceptBytes(s), n == s.size());
      if (n != s.size()) {
        EXPECT_EQ(whole.CanEnd(), can_end_before);
        EXPECT_EQ(whole.stack_count(), stacks_before);
        EXPECT_EQ(whole.rollback_available(), 0);
        EXPECT_EQ(whole.AcceptBytes(s.substr(0, n)), true);
      }
    }
    // The mix must exercise both answers, or the comparison proves little.
    EXPECT_GT(full_accepts, 50);
    EXPECT_GT(rejects, 50);
    EXPECT_GT(prefixes, 100);
  }
}

TEST(GrammarMatcherTest, CompileErrorsNameTheProblem) {
  Grammar left;
  const uint32_t r = left.AddRule("expr");
  left.AddAlternative(r, {Grammar::Ref(r), left.Byte('+')});
  left.AddAlternative(r, {left.Byte('x')});
  left.set_root(r);
  auto status = CompiledGrammar::Create(left, nullptr).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("left recursion"), std::string::npos) << status;

  Grammar empty;
  const uint32_t root = empty.AddRule("root");
  empty.AddAlternative(root, {empty.Byte('a'), empty.Bytes(ByteSet())});
  empty.set_root(root);
  status = CompiledGrammar::Create(empty, nullptr).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("matches no string"), std::string::npos) << status;

  CompileOptions options;
  options.refine_depth = 65;
  status = CompiledGrammar::Create(testing::NestedBrackets(), nullptr, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("refine_depth"), std::string::npos) << status;
}

// Short rules referenced from several places get private copies, so where
// they return to is static (what the mask precompute relies on).
TEST(ProgramTest, ShortSharedRulesGetPrivateCopies) {
  const Grammar g = testing::BoundedString();
  auto program = Program::Build(g);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_GT(program->rule_count(), g.rules().size());
  int chars = 0;
  for (uint32_t r = 0; r < program->rule_count(); ++r) {
    if (program->rule_name(r) != "char") continue;
    ++chars;
    EXPECT_LT(program->return_of(r), program->size()) << "copy " << r << " returns to more than one place";
  }
  EXPECT_EQ(chars, 6);  // one per step of char{2,6}
}

TEST(GrammarMatcherTest, ForcedBytesFollowFixedKeys) {
  GrammarMatcher m(Compile(testing::FixedKeys()));
  EXPECT_EQ(m.ForcedBytes(100), "{\"name\":\"");
  EXPECT_EQ(m.ForcedBytes(3), "{\"n");
  EXPECT_EQ(m.rollback_available(), 0);  // asking changes nothing
  ASSERT_TRUE(m.AcceptBytes("{\"name\":\"Bo"));
  EXPECT_EQ(m.ForcedBytes(100), "");  // more characters or the closing quote
  ASSERT_TRUE(m.AcceptBytes("b\""));
  EXPECT_EQ(m.ForcedBytes(100), ",\"age\":");
  ASSERT_TRUE(m.AcceptBytes(",\"age\":0"));
  EXPECT_EQ(m.ForcedBytes(100), "}");  // no leading zeros: "0" can only close
  ASSERT_TRUE(m.AcceptBytes("}"));
  EXPECT_TRUE(m.IsCompleted());
  EXPECT_EQ(m.ForcedBytes(100), "");
}

TEST(GrammarMatcherTest, ForcedBytesStopWhereTheGrammarCanEnd) {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  g.AddAlternative(root, g.Literal("ab"));
  g.AddAlternative(root, g.Literal("abcd"));
  g.set_root(root);
  GrammarMatcher m(Compile(g));
  EXPECT_EQ(m.ForcedBytes(10), "ab");
  ASSERT_TRUE(m.AcceptBytes("ab"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_EQ(m.ForcedBytes(10), "");  // "c" is the only byte, but ending is possible
  ASSERT_TRUE(m.AcceptBytes("c"));
  EXPECT_EQ(m.ForcedBytes(10), "d");
}

TEST(GrammarMatcherTest, CompletedIsNotDead) {
  GrammarMatcher m(Compile(testing::SharedPrefixes()));
  ASSERT_TRUE(m.AcceptBytes("abcde"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.IsCompleted());
  EXPECT_FALSE(m.IsDead());
  EXPECT_FALSE(m.AcceptByte('x'));
  EXPECT_TRUE(m.IsCompleted());
}

// Observable state: what each byte does next, CanEnd and ForcedBytes.
std::string Fingerprint(const GrammarMatcher& m) {
  std::string f = m.CanEnd() ? "E" : "-";
  for (int b = 0; b < 256; ++b) {
    GrammarMatcher copy = m;
    f.push_back(copy.AcceptByte(static_cast<uint8_t>(b)) ? '1' : '0');
  }
  return f + "|" + m.ForcedBytes(32);
}

TEST(GrammarMatcherTest, RollbackRestoresTheExactState) {
  const Grammar g = testing::AnyJson(2, /*ascii_only=*/true);
  auto compiled = Compile(g);
  testing::StringGenerator gen(g, /*seed=*/5);
  std::mt19937 rng(7);
  MatcherOptions options;
  options.max_rollback = 16;
  for (int round = 0; round < 40; ++round) {
    GrammarMatcher m(compiled, options);
    std::vector<std::string> fingerprints = {Fingerprint(m)};
    const std::string doc = gen.Sentence();
    // Accept the document in random chunks, remembering each state.
    for (size_t at = 0; at < doc.size();) {
      const size_t len = std::min(doc.size() - at, size_t{1} + rng() % 4);
      ASSERT_TRUE(m.AcceptBytes(doc.substr(at, len)));
      fingerprints.push_back(Fingerprint(m));
      at += len;
    }
    const int kept = std::min<int>(16, static_cast<int>(fingerprints.size()) - 1);
    ASSERT_EQ(m.rollback_available(), kept);
    EXPECT_EQ(m.Rollback(kept + 1).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Fingerprint(m), fingerprints.back());  // a refused rollback changes nothing
    // Random depths, then re-accepting, then more rollbacks.
    int depth = static_cast<int>(fingerprints.size()) - 1;
    int available = kept;
    for (int k = 0; k < 6 && available > 0; ++k) {
      const int steps = 1 + static_cast<int>(rng() % available);
      ASSERT_TRUE(m.Rollback(steps).ok());
      depth -= steps;
      available -= steps;
      fingerprints.resize(depth + 1);
      ASSERT_EQ(Fingerprint(m), fingerprints.back()) << "after rolling back " << steps;
      if (m.AcceptByte(' ')) {  // whitespace is allowed almost everywhere in this grammar
        fingerprints.push_back(Fingerprint(m));
        ++depth;
        ++available;
      }
    }
  }
}

TEST(GrammarMatcherTest, CompactionKeepsStateAndBoundsTheArena) {
  auto compiled = Compile(testing::NestedBrackets());
  MatcherOptions tight;
  tight.compact_after_nodes = 8;
  tight.max_rollback = 4;
  GrammarMatcher compacting(compiled, tight);
  GrammarMatcher plain(compiled);
  std::string doc;
  for (int i = 0; i < 300; ++i) doc += (i % 3 == 0) ? "[" : "(";
  for (int i = 299; i >= 0; --i) doc += (i % 3 == 0) ? "]" : ")";
  size_t max_nodes = 0;
  for (char c : doc) {
    ASSERT_TRUE(compacting.AcceptByte(static_cast<uint8_t>(c)));
    ASSERT_TRUE(plain.AcceptByte(static_cast<uint8_t>(c)));
    ASSERT_EQ(Fingerprint(compacting), Fingerprint(plain));
    max_nodes = std::max(max_nodes, compacting.arena_nodes());
  }
  EXPECT_TRUE(compacting.CanEnd());
  ASSERT_TRUE(compacting.Rollback(4).ok());
  ASSERT_TRUE(plain.Rollback(4).ok());
  EXPECT_EQ(Fingerprint(compacting), Fingerprint(plain));
  // Live stacks are at most ~300 frames deep plus the history's; the plain
  // arena keeps every node it ever made.
  EXPECT_LT(max_nodes, plain.arena_nodes());
  EXPECT_LT(compacting.arena_nodes(), 4 * 310);
}

TEST(GrammarMatcherTest, ResetReturnsToTheStart) {
  GrammarMatcher m(Compile(testing::FixedKeys()));
  const std::string start = Fingerprint(m);
  ASSERT_TRUE(m.AcceptBytes("{\"name\":\"x\""));
  m.Reset();
  EXPECT_EQ(Fingerprint(m), start);
  EXPECT_EQ(m.rollback_available(), 0);
}

}  // namespace
}  // namespace floe::grammar
