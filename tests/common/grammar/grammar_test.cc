// The grammar IR: byte sets, the repetition builders (checked against the
// Earley oracle over every short string), nullability and CheckIntegrity's
// refusals.
#include "common/grammar/grammar.h"

#include <string>

#include <gtest/gtest.h>

#include "tests/common/grammar/grammar_oracle.h"

namespace floe::grammar {
namespace {

using testing::OracleAccepts;

TEST(ByteSetTest, RangesComplementAndCount) {
  ByteSet digits = ByteSet::Range('0', '9');
  EXPECT_EQ(digits.Count(), 10);
  EXPECT_TRUE(digits.Has('5'));
  EXPECT_FALSE(digits.Has('a'));
  EXPECT_EQ(digits.Complement().Count(), 246);
  EXPECT_FALSE(digits.Complement().Has('0'));
  EXPECT_TRUE(ByteSet().Empty());
  EXPECT_EQ(ByteSet::All().Count(), 256);
  EXPECT_TRUE(ByteSet::All().Has(0xff));
  ByteSet both = ByteSet::Of('a');
  both.AddAll(digits);
  EXPECT_EQ(both.Count(), 11);
}

// Every string over {a, b} up to `len` bytes.
std::vector<std::string> AllStrings(int len) {
  std::vector<std::string> out{""};
  for (size_t i = 0; i < out.size(); ++i)
    if (static_cast<int>(out[i].size()) < len)
      for (char c : {'a', 'b'}) out.push_back(out[i] + c);
  return out;
}

TEST(GrammarTest, RepeatMatchesExactlyItsBounds) {
  for (int min = 0; min <= 3; ++min)
    for (int max : {-1, 0, 1, 2, 4}) {
      if (max >= 0 && max < min) continue;
      Grammar g;
      const uint32_t root = g.AddRule("root");
      g.AddAlternative(root, {g.Repeat(g.Byte('a'), min, max, "a"), g.Byte('b')});
      g.set_root(root);
      ASSERT_TRUE(g.CheckIntegrity().ok()) << g.ToGbnf();
      for (const std::string& s : AllStrings(7)) {
        const int as = static_cast<int>(s.size()) - 1;
        const bool want = !s.empty() && s.back() == 'b' && s.find('b') == s.size() - 1 && as >= min &&
                          (max < 0 || as <= max);
        EXPECT_EQ(OracleAccepts(g, s), want) << "{" << min << "," << max << "} '" << s << "'\n" << g.ToGbnf();
      }
    }
}

TEST(GrammarTest, StarPlusOptionalChoiceAndGroup) {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  // root ::= ("ab")+ "b"? | "a"*
  Element ab = g.Group(g.Literal("ab"), "ab");
  g.AddAlternative(root, {g.Plus(ab, "ab"), g.Optional(g.Byte('b'), "b")});
  g.AddAlternative(root, {g.Star(g.Byte('a'), "a")});
  g.set_root(root);
  ASSERT_TRUE(g.CheckIntegrity().ok());
  for (const char* yes : {"", "a", "aaa", "ab", "abab", "abb", "ababb"}) EXPECT_TRUE(OracleAccepts(g, yes)) << yes;
  for (const char* no : {"b", "aba", "abbb", "ba"}) EXPECT_FALSE(OracleAccepts(g, no)) << no;
  Grammar c;
  const uint32_t r = c.AddRule("root");
  c.AddAlternative(r, {c.Choice({c.Literal("x"), c.Literal("yz"), {}}, "xyz"), c.Byte('!')});
  c.set_root(r);
  for (const char* yes : {"x!", "yz!", "!"}) EXPECT_TRUE(OracleAccepts(c, yes)) << yes;
  EXPECT_FALSE(OracleAccepts(c, "y!"));
}

TEST(GrammarTest, RuleNamesStayUniqueAndByteSetsAreShared) {
  Grammar g;
  EXPECT_EQ(g.AddRule("item"), 0u);
  EXPECT_EQ(g.AddRule("item"), 1u);
  EXPECT_EQ(g.rules()[1].name, "item-2");
  EXPECT_EQ(g.Byte('a').index, g.Byte('a').index);
  EXPECT_NE(g.Byte('a').index, g.Byte('b').index);
  EXPECT_EQ(g.byte_sets().size(), 2u);
}

TEST(GrammarTest, NullableRulesAreTheFixedPoint) {
  Grammar g;
  const uint32_t a = g.AddRule("a"), b = g.AddRule("b"), c = g.AddRule("c");
  g.AddAlternative(a, {Grammar::Ref(b), Grammar::Ref(b)});  // nullable through b
  g.AddAlternative(b, {g.Byte('x')});
  g.AddAlternative(b, {});
  g.AddAlternative(c, {Grammar::Ref(b), g.Byte('y')});  // never empty
  const std::vector<bool> nullable = g.NullableRules();
  EXPECT_TRUE(nullable[a]);
  EXPECT_TRUE(nullable[b]);
  EXPECT_FALSE(nullable[c]);
}

TEST(GrammarTest, CheckIntegrityRefusesWhatTheMatcherCannotRun) {
  Grammar none;
  EXPECT_EQ(none.CheckIntegrity().message(), "the grammar has no root rule");

  Grammar empty;
  empty.set_root(empty.AddRule("root"));
  EXPECT_EQ(empty.CheckIntegrity().message(), "rule 'root' has no alternatives");

  Grammar dangling;
  const uint32_t root = dangling.AddRule("root");
  dangling.AddAlternative(root, {Grammar::Ref(7)});
  dangling.set_root(root);
  EXPECT_EQ(dangling.CheckIntegrity().message(), "rule 'root' refers to a missing rule");

  // expr ::= opt expr "+" "1" | "1", where opt is nullable: left recursion
  // hidden behind a nullable prefix.
  Grammar left;
  const uint32_t expr = left.AddRule("expr");
  const Element opt = left.Optional(left.Byte('-'), "sign");
  left.AddAlternative(expr, {opt, Grammar::Ref(expr), left.Byte('+'), left.Byte('1')});
  left.AddAlternative(expr, {left.Byte('1')});
  left.set_root(expr);
  EXPECT_EQ(left.CheckIntegrity().message(), "left recursion: expr -> expr");

  // Right recursion is fine.
  Grammar right;
  const uint32_t list = right.AddRule("list");
  right.AddAlternative(list, {right.Byte('1'), right.Byte(','), Grammar::Ref(list)});
  right.AddAlternative(list, {right.Byte('1')});
  right.set_root(list);
  EXPECT_TRUE(right.CheckIntegrity().ok());
  EXPECT_TRUE(OracleAccepts(right, "1,1,1"));
}

TEST(GrammarTest, ToGbnfPrintsRootFirstWithEscapes) {
  Grammar g;
  const uint32_t helper = g.AddRule("tail");
  g.AddAlternative(helper, {g.Bytes(ByteSet::Range('0', '9')), g.Bytes(ByteSet::Of(0x80))});
  const uint32_t root = g.AddRule("root");
  g.AddAlternative(root, g.Literal("a\"b"));
  g.AddAlternative(root, {Grammar::Ref(helper)});
  g.AddAlternative(root, {});
  g.set_root(root);
  EXPECT_EQ(g.ToGbnf(), "root ::= \"a\" \"\\\"\" \"b\" | tail | \"\"\ntail ::= [0-9] \"\\x80\"\n");
}

}  // namespace
}  // namespace floe::grammar
