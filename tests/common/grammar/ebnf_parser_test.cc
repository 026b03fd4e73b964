// The GBNF front end on llama.cpp's own grammars (grammars/*.gbnf there,
// verbatim), on every piece of the syntax, on its errors (line:column and
// what was expected), and on the ToGbnf round trip: the dump, read back
// byte-level, accepts the same strings as the original per the Earley
// oracle.
#include "common/grammar/ebnf_parser.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/common/grammar/grammar_oracle.h"
#include "tests/common/grammar/grammar_sampler.h"
#include "tests/common/grammar/test_strings.h"

namespace floe::grammar {
namespace {

using testing::CodePoints;
using testing::GrammarSampler;
using testing::Mutate;
using testing::OracleAccepts;
using testing::OracleIsPrefix;
using testing::RandomString;
using testing::Utf8;

// llama.cpp grammars/json.gbnf.
constexpr const char* kJson = R"gbnf(# Grammar for subset of JSON - doesn't support full string or number syntax

root  ::= object
value ::= object | array | string | number | boolean

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}"

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]"

string  ::=
  "\"" (
    [\x20\x21\x23-\x5b\x5d-\U0010FFFF] | # any code point except " (\x22) and \ (\x5c)
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]) # escapes
  )* "\""

# Only plain integers currently
number  ::= "-"? [0-9]+ ws
boolean ::= ("true" | "false") ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= ([ \t\n] ws)?
)gbnf";

// llama.cpp grammars/arithmetic.gbnf.
constexpr const char* kArithmetic = R"gbnf(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)gbnf";

// llama.cpp grammars/list.gbnf.
constexpr const char* kList = R"gbnf(root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
)gbnf";

// llama.cpp's chess grammar as its README walks through it (comments and
// newlines inside the group), with the rules of grammars/chess.gbnf.
constexpr const char* kChess = R"gbnf(# `root` specifies the pattern for the overall output
root ::= (
    # it must start with the characters "1. " followed by a sequence
    # of characters that match the `move` rule, followed by a space, followed
    # by another move, and then a newline
    "1. " move " " move "\n"

    # it's followed by one or more subsequent moves, numbered with one or two digits
    ([1-9] [0-9]? ". " move " " move "\n")+
)

# `move` is an abstract representation, which can be a pawn, nonpawn, or castle.
# The `[+#]?` denotes the possibility of checking or mate signs after moves
move    ::= (pawn | nonpawn | castle) [+#]?
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
pawn    ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?
castle  ::= "O-O" "-O"?
)gbnf";

// llama.cpp grammars/japanese.gbnf.
constexpr const char* kJapanese = R"gbnf(# A probably incorrect grammar for Japanese
root        ::= jp-char+ ([ \t\n] jp-char+)*
jp-char     ::= hiragana | katakana | punctuation | cjk
hiragana    ::= [ぁ-ゟ]
katakana    ::= [ァ-ヿ]
punctuation ::= [、-〾]
cjk         ::= [一-鿿]
)gbnf";

// Every piece of the syntax at once.
constexpr const char* kSyntax = R"gbnf(root ::= greeting sep name{1,3} tail
# a comment line
greeting ::= "h\x65llo" | "\u00e9t\U0001F600"   # escapes are code points
  | "hi"
sep ::= [ \t]+ |
        ","
name ::= [A-Z] [a-z]{0,4} "."?
tail ::= (
   "!" # a comment in a group
   | [?\]\-\^]
){2} | . | "" | "end" [^a-z]{2,} | "x"{3,}
)gbnf";

Grammar MustParse(std::string_view text) {
  absl::StatusOr<Grammar> g = ParseGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return Grammar();
  EXPECT_TRUE(g->CheckIntegrity().ok());
  return *std::move(g);
}

TEST(EbnfParserTest, LlamaCppJson) {
  const Grammar g = MustParse(kJson);
  for (const char* s : {"{}", R"({"a": 1})", "{\"a\": [1, -2, \"x\\u00e9y\", true], \"b\": {}}",
                        "{ \"k\":\n\t{\"é中😀\":[ ]}}", R"({"esc": "\"\\\/\b\f\n\r\t"})"})
    EXPECT_TRUE(OracleAccepts(g, s)) << s;
  for (const char* s : {"", "[]", R"({"a" 1})", R"({"a": 1,})", R"({"a": tru})", "{\"a\": \"\x01\"}",
                        R"({"a": "\x"})", "{\"a\": \"\xC3\"}"})
    EXPECT_FALSE(OracleAccepts(g, s)) << s;
  EXPECT_TRUE(OracleIsPrefix(g, R"({"a": [1, {"b)"));
  EXPECT_FALSE(OracleIsPrefix(g, R"({"a": ])"));
}

TEST(EbnfParserTest, LlamaCppArithmetic) {
  const Grammar g = MustParse(kArithmetic);
  for (const char* s : {"a=1\n", "x +2*(y -3) = 4\n", "a=b\nc=d\n", "( a )=b \n"})
    EXPECT_TRUE(OracleAccepts(g, s)) << s;
  for (const char* s : {"a=1", "=1\n", "a==1\n", "A=1\n", "a=1+\n"}) EXPECT_FALSE(OracleAccepts(g, s)) << s;
}

TEST(EbnfParserTest, LlamaCppList) {
  const Grammar g = MustParse(kList);
  EXPECT_TRUE(OracleAccepts(g, "- apple\n- 中文 😀\n"));
  EXPECT_FALSE(OracleAccepts(g, "- a\u2028b\n"));
  EXPECT_FALSE(OracleAccepts(g, "- a\u0085b\n"));
  EXPECT_FALSE(OracleAccepts(g, "- \n"));
  EXPECT_FALSE(OracleAccepts(g, ""));
}

TEST(EbnfParserTest, LlamaCppChess) {
  const Grammar g = MustParse(kChess);
  EXPECT_TRUE(OracleAccepts(g, "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n"));
  EXPECT_TRUE(OracleAccepts(g, "1. d4 d5\n12. O-O-O exd8=Q#\n"));
  EXPECT_FALSE(OracleAccepts(g, "1. e4 e5\n"));  // one more numbered line is required
  EXPECT_FALSE(OracleAccepts(g, "1. e9 e5\n2. a1 a2\n"));
}

TEST(EbnfParserTest, LlamaCppJapanese) {
  const Grammar g = MustParse(kJapanese);
  EXPECT_TRUE(OracleAccepts(g, "こんにちは カタカナ、漢字"));
  EXPECT_FALSE(OracleAccepts(g, "こんにちは  世界"));  // two spaces
  EXPECT_FALSE(OracleAccepts(g, "abc"));
}

TEST(EbnfParserTest, EverySyntaxElement) {
  const Grammar g = MustParse(kSyntax);
  for (const char* s : {"hello Bob!!", "ét😀,AnnBo.?]", "hi\t\tX.Y中", "hi Z", "hi Zend12", "hi Zxxxx", "hi A-^"})
    EXPECT_TRUE(OracleAccepts(g, s)) << s;
  for (const char* s : {"hello bob!!", "hello Bob!!!", "hi ABCDE", "hi Zendaa1", "hi 1", "hello,Bobbbb!", "\u00e9t"})
    EXPECT_FALSE(OracleAccepts(g, s)) << s;
}

TEST(EbnfParserTest, RepeatsOfOptionalItemsAreNotLeftRecursive) {
  // (ws)* with a nullable ws would be `star ::= ws star`: left recursion.
  // The front end repeats ws-without-"" instead; the language is the same.
  const Grammar g = MustParse(
      "root ::= (ws)* \"x\" (ws? \"y\"?)+ ((\"\")*)* end*\n"
      "ws ::= \" \"?\n"
      "end ::= opt opt\n"
      "opt ::= \"z\" | \"\"\n");
  for (const char* s : {"x", "  x", "xy y", "x zzz", " x yy"}) EXPECT_TRUE(OracleAccepts(g, s)) << s;
  for (const char* s : {"", "y", "xa"}) EXPECT_FALSE(OracleAccepts(g, s)) << s;
}

struct BadGrammar {
  std::string text;
  std::string message;  // the whole message, or a part of it
};

TEST(EbnfParserTest, ErrorsNameLineColumnAndWhatWasExpected) {
  const std::vector<BadGrammar> cases = {
      {"root ::= foo", "grammar: line 1:10: undefined rule 'foo'"},
      {"a ::= \"x\"", "grammar: no rule named 'root' (the start rule)"},
      {"root ::= \"abc", "grammar: line 1:10: unterminated string literal (expected '\"')"},
      {"root ::= \"\\q\"", "grammar: line 1:11: unknown escape '\\q'"},
      {"root \"x\"", "grammar: line 1:6: expected '::=' after the rule name 'root'"},
      {"root ::= (\"a\" | \"b\"\n", "grammar: line 2:1: expected ')' to close the group opened at line 1:10"},
      {"root ::= \"a\"{1001}", "grammar: line 1:14: repetition bound 1001 is above max_repeat=1000"},
      {"root ::= \"a\"{99999999999999999999}", "is above max_repeat=1000"},
      {"root ::= root \"a\" | \"b\"", "grammar: left recursion: root -> root"},
      {"root ::= a\na ::= b? root \"x\"\nb ::= \"y\"", "grammar: left recursion"},
      {"root ::= \"a\"\nroot ::= \"b\"", "grammar: line 2:1: rule 'root' is defined twice (first at line 1:1)"},
      {"root ::= \"a\"{3,2}", "grammar: line 1:13: repetition {m,n} needs m <= n"},
      {"root ::= \"a\"**", "grammar: line 1:14: expected an item before '*'"},
      {"root ::= * \"a\"", "grammar: line 1:10: expected an item before '*'"},
      {"root ::= [z-a]", "grammar: line 1:11: character range out of order"},
      {"root ::= \"a\" )", "grammar: line 1:14: expected an item, '|' or the end of the line, found ')'"},
      {"::= \"a\"", "grammar: line 1:1: expected a rule name"},
      {"\n\n  root ::= [abc", "grammar: line 3:12: unterminated character class (expected ']')"},
      {"root ::= \"é\" foo", "grammar: line 1:14: undefined rule 'foo'"},
      {"root ::= \"\\uD800\"", "grammar: line 1:11: a surrogate code point has no UTF-8 encoding"},
      {"root ::= \"\\U00110000\"", "code point above U+10FFFF"},
      {"root ::= \"\\x4\"", "expected 2 hex digits"},
      {"root ::= \"\xC3\"", "invalid UTF-8"},
      {"root ::= \"a\"{2", "expected '}' to close the repetition"},
      {"root ::= " + std::string(100, 'n'), "undefined rule '" + std::string(48, 'n') + "...'"},
  };
  for (const BadGrammar& c : cases) {
    absl::StatusOr<Grammar> g = ParseGbnf(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(g.status().message().find(c.message), std::string_view::npos)
        << c.text << "\n got: " << g.status().message() << "\n want: " << c.message;
  }
}

TEST(EbnfParserTest, LimitsAreEnforcedAndNamed) {
  GbnfLimits limits;
  limits.max_text_bytes = 10;
  EXPECT_NE(ParseGbnf("root ::= \"abcdef\"", limits).status().message().find("max_text_bytes=10"),
            std::string_view::npos);
  limits = {};
  limits.max_nesting = 3;
  EXPECT_TRUE(ParseGbnf("root ::= (((\"a\")))", limits).ok());
  EXPECT_NE(ParseGbnf("root ::= ((((\"a\"))))", limits).status().message().find(
                "line 1:13: groups nest deeper than max_nesting=3"),
            std::string_view::npos);
  limits = {};
  limits.max_rules = 3;
  const char* four_rules = "root ::= a b c\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"";
  EXPECT_NE(ParseGbnf(four_rules, limits).status().message().find("max_rules=3"), std::string_view::npos);
  EXPECT_NE(ParseGbnf("root ::= \"a\"{0,10}", limits).status().message().find("max_rules=3"), std::string_view::npos);
  limits = {};
  limits.max_repeat = 5;
  EXPECT_NE(ParseGbnf("root ::= \"a\"{6,}", limits).status().message().find("max_repeat=5"), std::string_view::npos);
  // A deep chain of repeats costs the sum of the bounds.
  absl::StatusOr<Grammar> chained = ParseGbnf("root ::= (((\"a\"{0,1000}){0,1000}){0,1000}){0,1000}");
  ASSERT_TRUE(chained.ok()) << chained.status();
  EXPECT_LT(chained->rules().size(), 5000u);
}

// Strings near the language of `a`: its samples, random edits of them,
// and random strings over the characters its samples use.
std::vector<std::string> Probes(const Grammar& a, const Grammar& b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::u32string> samples;
  std::u32string alphabet = U"ab{}[]\":,. -\n\t\\xé中";
  for (const Grammar* g : {&a, &b}) {
    const GrammarSampler sampler(*g);
    for (int i = 0; i < 60; ++i) {
      std::optional<std::u32string> cps = CodePoints(sampler.Sample(rng, 12).value());
      if (!cps) continue;  // a byte-level grammar may derive malformed UTF-8
      alphabet += *cps;
      samples.push_back(*std::move(cps));
    }
  }
  std::vector<std::string> probes;
  for (const std::u32string& s : samples) probes.push_back(Utf8(s));
  for (int i = 0; i < 200 && !samples.empty(); ++i)
    probes.push_back(Utf8(Mutate(samples[rng() % samples.size()], alphabet, rng)));
  for (int i = 0; i < 50; ++i) probes.push_back(Utf8(RandomString(alphabet, 10, rng)));
  return probes;
}

std::vector<std::string> SortedLines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  std::sort(lines.begin(), lines.end());
  return lines;
}

TEST(EbnfParserTest, ToGbnfRoundTripAcceptsTheSameStrings) {
  uint32_t seed = 1;
  for (const char* text : {kJson, kArithmetic, kList, kChess, kJapanese, kSyntax}) {
    const Grammar original = MustParse(text);
    const std::string dump = original.ToGbnf();
    absl::StatusOr<Grammar> back = ParseGbnfBytes(dump);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << dump;
    ASSERT_TRUE(back->CheckIntegrity().ok());
    int accepted = 0;
    for (const std::string& s : Probes(original, *back, seed++)) {
      const bool ok = OracleAccepts(original, s);
      accepted += ok;
      ASSERT_EQ(ok, OracleAccepts(*back, s)) << ::testing::PrintToString(s) << "\n" << dump;
      ASSERT_EQ(OracleIsPrefix(original, s), OracleIsPrefix(*back, s)) << ::testing::PrintToString(s);
    }
    EXPECT_GT(accepted, 50) << text;  // the comparison was not only over rejects
    // A dump reads back rule for rule (only their order may change).
    EXPECT_EQ(SortedLines(back->ToGbnf()), SortedLines(dump));
  }
}

TEST(EbnfParserTest, ByteLevelDialect) {
  // \xNN is a byte, not U+00NN, and `.` any byte.
  absl::StatusOr<Grammar> g = ParseGbnfBytes("root ::= [\\xC3] \"\\xA9\" . [^\\x00-\\x7F]");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(OracleAccepts(*g, "\xC3\xA9\x01\x80"));
  EXPECT_FALSE(OracleAccepts(*g, "\xC3\x83\xC2\xA9\x01\x80"));
  EXPECT_NE(ParseGbnfBytes("root ::= \"\\u0100\"").status().message().find("above \\xFF"), std::string_view::npos);
  // The code point dialect reads the same text as UTF-8 characters.
  absl::StatusOr<Grammar> cp = ParseGbnf("root ::= \"\\xE9\"");
  ASSERT_TRUE(cp.ok());
  EXPECT_TRUE(OracleAccepts(*cp, "é"));
  EXPECT_FALSE(OracleAccepts(*cp, "\xE9"));
}

}  // namespace
}  // namespace floe::grammar
