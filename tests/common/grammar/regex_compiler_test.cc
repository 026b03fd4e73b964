// The regex front end against an independent regex engine: libstdc++'s
// std::wregex (ECMAScript grammar) on code points. For each pattern, the
// compiled grammar (run by the Earley oracle) and std::regex_match must
// agree on hand-written members, on random strings the grammar derives,
// on their random mutations and on random strings over the pattern's own
// characters. Where libstdc++ departs from ECMAScript (named groups,
// \u{...}, Annex B ranges like [\w-.]) a case gives std::regex an
// equivalent pattern it reads.
#include "common/grammar/regex_compiler.h"

#include <algorithm>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/grammar/utf8_ranges.h"
#include "gtest/gtest.h"
#include "tests/common/grammar/grammar_oracle.h"
#include "tests/common/grammar/grammar_sampler.h"
#include "tests/common/grammar/test_strings.h"

namespace floe::grammar {
namespace {

using testing::CodePoints;
using testing::GrammarSampler;
using testing::Mutate;
using testing::RandomString;
using testing::Utf8;
using testing::OracleAccepts;
using testing::OracleIsPrefix;

std::wstring Wide(std::string_view utf8) {
  const std::u32string cps = CodePoints(utf8).value();
  return std::wstring(cps.begin(), cps.end());  // wchar_t is UTF-32 here
}

struct Case {
  std::string pattern;
  std::vector<std::string> members;  // must match
  std::string reference = "";        // what std::regex reads instead, if not `pattern`
};

// Patterns as they appear in JSON Schemas and guided_regex requests.
const std::vector<Case>& Cases() {
  static const auto* cases = new std::vector<Case>{
      {R"(^\d{4}-\d{2}-\d{2}$)", {"2024-01-15", "0000-99-99"}},
      {R"(^([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?$)", {"23:59", "00:00:00", "19:07:31"}},
      {R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]\d{2}:\d{2})$)",
       {"2024-02-29T12:30:00Z", "1999-12-31T23:59:59.123+05:30"}},
      {R"(^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$)", {"john.doe@example.com", "a+b@c.io"}},
      {R"(^[\w-\.]+@([\w-]+\.)+[\w-]{2,4}$)", {"first_last@mail.example.org"}, R"(^[\w\-\.]+@([\w-]+\.)+[\w-]{2,4}$)"},
      {R"(^\+?1?[-. ]?\(?\d{3}\)?[-. ]?\d{3}[-. ]?\d{4}$)", {"+1 (555) 123-4567", "5551234567", "555.123.4567"}},
      {R"(^\+[1-9]\d{1,14}$)", {"+14155552671", "+44"}},
      {R"(^[A-Za-z_][A-Za-z0-9_]*$)", {"snake_case_1", "_", "X"}},
      {R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-5][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$)",
       {"123e4567-e89b-12d3-a456-426614174000"}},
      {R"(^#(?:[0-9a-fA-F]{3}){1,2}$)", {"#fff", "#A0b1C2"}},
      {R"(^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*))"
       R"((?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?$)",
       {"1.0.0", "10.20.30-alpha.1", "0.0.1-rc-1"}},
      {R"(^((25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)$)", {"192.168.0.1", "255.255.255.255"}},
      {R"(^\d{5}(-\d{4})?$)", {"12345", "12345-6789"}},
      {R"(^(red|green|blue|yellow)$)", {"red", "yellow"}},
      {R"((GET|POST|PUT|DELETE|PATCH))", {"PATCH", "GET"}},
      {R"(^[a-z]{3,8}$)", {"abc", "abcdefgh"}},
      {R"(^a{2}b{0,3}c{1,}$)", {"aac", "aabbbccc"}},
      {R"(^((ab|cd)*e)+$)", {"e", "abcde", "ecdabe"}},
      {R"(^(a?b?)*c$)", {"c", "abbac"}},
      {R"(^(a*)*$)", {"", "aaaa"}},
      {R"(^(|a)+b$)", {"b", "aab"}},
      {R"(^(?:x|y?)+$)", {"", "xyyx"}},
      {R"(^[\u4e00-\u9fff]+$)", {"中文", "漢字"}},
      {"^[à-ÿ]+$", {"éàü"}},
      {R"(^\u{1F600}+ok$)", {"😀ok", "😀😀ok"}, "^😀+ok$"},
      {R"(^\uD83D\uDE00$)", {"😀"}, "^😀$"},
      {R"(^.{2,5}$)", {"ab", "中😀é", "a b c"}},
      {R"(^[^a-z\n]+$)", {"ABC", "中😀"}},
      {R"(^\D+\W\w$)", {"ab!c", "中 1"}},
      // libstdc++'s \s is ASCII-only: the reference spells ECMAScript's out.
      {R"(^\S+\s\S+$)", {"hello world", "a\tb", "中\u3000文"},
       R"(^[^\t-\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+)"
       R"([\t-\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff])"
       R"([^\t-\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+$)"},
      {R"(^\/api\/v\d+\/users\/\d+$)", {"/api/v1/users/42"}},
      {R"(^https?:\/\/[\w.-]+(?:\.[\w.-]+)+[\w\-._~:\/?#\[\]@!$&'()*+,;=]*$)",
       {"https://example.com/path?q=1#frag", "http://a.b"}},
      {R"(^a+?b*?c??$)", {"a", "aabbc"}},
      {R"(^(?<year>\d{4})-(?<month>\d{2})$)", {"2024-06"}, R"(^(\d{4})-(\d{2})$)"},
      {R"(abc|def|)", {"abc", "def", ""}},
      {R"(^$)", {""}},
      {R"(^[\x41-\x5A]{2}\x2D\d$)", {"AB-1"}},
      {R"(^\.\*\+\?\(\)\[\]\{\}\|\^\$\\$)", {R"(.*+?()[]{}|^$\)"}},
      {R"(^(?:\d{3}-){2}\d{4}$)", {"123-456-7890"}},
      {R"(^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$)", {"", "QUJD", "QUI=", "QQ=="}},
      {R"(^[a-z0-9]+(?:-[a-z0-9]+)*$)", {"my-slug-2"}},
      {R"(^[^"\\]*$)", {"", "it's fine", "中"}},
      {R"(^[A-Z]{2}\d{2}[A-Z0-9]{1,30}$)", {"DE44500105175407324931"}},
      {R"(^(\d+|\d*\.\d+)([eE][+-]?\d+)?$)", {"1", ".5", "3.14e-10"}},
      {R"(^[\s\S]{0,3}$)", {"", "\n\n", "a中😀"}, R"(^[^]{0,3}$)"},
      {R"(^[]a|b[^]$)", {"b\n", "bx"}},
      {R"(^\t\n\r\f\v\0\cJ$)", {std::string("\t\n\r\f\v\0\n", 7)}, R"(^\t\n\r\f\v\0\n$)"},
  };
  return *cases;
}

// Characters the random strings are made of: the pattern's own, plus a
// few of every UTF-8 length. No Unicode spaces other than ASCII: libstdc++'s
// \s is ASCII-only, ECMAScript's is not (tested separately).
std::u32string Alphabet(const Case& c) {
  std::u32string a = CodePoints(c.pattern).value();
  for (char32_t x : std::u32string(U"aAzZ09-._ @:/\n\té中😀ÿ")) a.push_back(x);
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

// Compares the compiled grammar with std::wregex (match or search) on
// members, samples, mutations and random strings.
void ExpectSameLanguage(const Case& c, RegexOptions::Match mode, uint32_t seed) {
  SCOPED_TRACE(c.pattern);
  RegexOptions options;
  options.match = mode;
  absl::StatusOr<Grammar> g = CompileRegex(c.pattern, options);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(g->CheckIntegrity().ok());
  const std::wregex reference(Wide(c.reference.empty() ? c.pattern : c.reference), std::regex::ECMAScript);
  auto reference_accepts = [&](const std::string& s) {
    const std::wstring w = Wide(s);
    return mode == RegexOptions::Match::kFull ? std::regex_match(w, reference) : std::regex_search(w, reference);
  };
  int compared = 0, accepted = 0;
  auto expect_agree = [&](const std::string& s) {
    const bool ok = OracleAccepts(*g, s);
    ++compared;
    accepted += ok;
    ASSERT_EQ(ok, reference_accepts(s)) << "on " << ::testing::PrintToString(s);
  };

  std::vector<std::u32string> seeds;
  for (const std::string& m : c.members) {
    EXPECT_TRUE(reference_accepts(m)) << "std::regex rejects member " << m;
    EXPECT_TRUE(OracleAccepts(*g, m)) << "grammar rejects member " << ::testing::PrintToString(m);
    seeds.push_back(CodePoints(m).value());
  }
  std::mt19937 rng(seed);
  const GrammarSampler sampler(*g);
  for (int i = 0; i < 100; ++i) {
    const std::optional<std::string> s = sampler.Sample(rng);
    ASSERT_TRUE(s.has_value());
    const std::optional<std::u32string> cps = CodePoints(*s);
    ASSERT_TRUE(cps.has_value()) << "the grammar derives malformed UTF-8: " << ::testing::PrintToString(*s);
    ASSERT_TRUE(reference_accepts(*s)) << "the grammar derives a non-match: " << ::testing::PrintToString(*s);
    seeds.push_back(*cps);
    // A byte that breaks the UTF-8 is never accepted.
    std::string broken = *s;
    broken.insert(broken.begin() + static_cast<std::ptrdiff_t>(rng() % (broken.size() + 1)),
                  static_cast<char>(0x80 + rng() % 0x80));
    if (!CodePoints(broken)) ASSERT_FALSE(OracleAccepts(*g, broken)) << ::testing::PrintToString(broken);
  }
  const std::u32string alphabet = Alphabet(c);
  for (int i = 0; i < 400; ++i) expect_agree(Utf8(Mutate(seeds[rng() % seeds.size()], alphabet, rng)));
  for (int i = 0; i < 200; ++i) expect_agree(Utf8(RandomString(alphabet, 8, rng)));
  EXPECT_GT(accepted, 0) << "the random strings never hit the language";
}

TEST(RegexCompilerTest, FullMatchAgreesWithStdRegex) {
  uint32_t seed = 1;
  for (const Case& c : Cases()) ExpectSameLanguage(c, RegexOptions::Match::kFull, seed++);
}

TEST(RegexCompilerTest, SearchAgreesWithStdRegexSearch) {
  const std::vector<Case> cases = {
      {"abc", {"abc", "xxabcxx"}},
      {R"(\d{3})", {"a123b"}},
      {"^ab", {"ab", "abzz"}},
      {"cd$", {"cd", "zzcd"}},
      {"^a|b$", {"axx", "xxb"}},
      {"x(y|z)*", {"qxyzq"}},
      {R"(^\d{4}-\d{2}-\d{2}$)", {"2024-01-15"}},
      {"", {"", "anything"}},
      {"(?:)", {""}},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) ExpectSameLanguage(c, RegexOptions::Match::kSearch, seed++);
}

// ECMAScript's \s and `.` on the Unicode line and space characters, where
// libstdc++ is ASCII-only: checked by hand.
TEST(RegexCompilerTest, UnicodeSpacesAndLineTerminators) {
  absl::StatusOr<Grammar> space = CompileRegex(R"(\s)");
  ASSERT_TRUE(space.ok());
  for (const char* s : {" ", "\t", "\n", "\v", "\f", "\r", "\u00A0", "\u1680", "\u2000", "\u200A", "\u2028",
                        "\u2029", "\u202F", "\u205F", "\u3000", "\uFEFF"})
    EXPECT_TRUE(OracleAccepts(*space, s)) << s;
  for (const char* s : {"a", "\u200B", "\u0085", "_"}) EXPECT_FALSE(OracleAccepts(*space, s)) << s;
  absl::StatusOr<Grammar> dot = CompileRegex(".");
  ASSERT_TRUE(dot.ok());
  for (const char* s : {"\n", "\r", "\u2028", "\u2029"}) EXPECT_FALSE(OracleAccepts(*dot, s)) << s;
  for (const char* s : {"\u0085", "\t", "\U0010FFFF", "\uFFFF"}) EXPECT_TRUE(OracleAccepts(*dot, s)) << s;
}

TEST(RegexCompilerTest, ExcludedCharactersAreNeverProduced) {
  RegexOptions options;
  options.excluded = ByteSet::Range(0, 0x1F);
  options.excluded.Add('"');
  options.excluded.Add('\\');
  for (const char* pattern : {R"(^.*$)", R"(^[^a]{0,6}$)", R"(^\W+$)", R"(^(a|"|\\)+$)", R"([\s\S]*)", R"(a\x22?b)"}) {
    SCOPED_TRACE(pattern);
    absl::StatusOr<Grammar> g = CompileRegex(pattern, options);
    ASSERT_TRUE(g.ok()) << g.status();
    const std::wregex reference(Wide(pattern));
    const GrammarSampler sampler(*g);
    std::mt19937 rng(5);
    for (int i = 0; i < 100; ++i) {
      const std::string s = sampler.Sample(rng).value();
      for (char ch : s) ASSERT_FALSE(options.excluded.Has(static_cast<uint8_t>(ch))) << ::testing::PrintToString(s);
      ASSERT_TRUE(std::regex_match(Wide(s), reference)) << ::testing::PrintToString(s);
    }
    // Otherwise the language is the regex's, less the strings with an
    // excluded character.
    for (const char* s : {"", "ab", "a\"b", "a\\b", "a\nb", "!!", "é", "a\tb", "\"", "x"}) {
      bool clean = true;
      for (const char* p = s; *p; ++p) clean = clean && !options.excluded.Has(static_cast<uint8_t>(*p));
      EXPECT_EQ(OracleAccepts(*g, s), clean && std::regex_match(Wide(s), reference)) << ::testing::PrintToString(s);
    }
  }
  absl::StatusOr<Grammar> impossible = CompileRegex(R"(^a"b$)", options);
  ASSERT_FALSE(impossible.ok());
  EXPECT_EQ(impossible.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(impossible.status().message().find("excluded"), std::string_view::npos);
}

TEST(RegexCompilerTest, UnsupportedConstructsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a(?=b)", "lookahead is not supported"},
      {"a(?!b)", "negative lookahead is not supported"},
      {"(?<=a)b", "lookbehind is not supported"},
      {"(?<!a)b", "negative lookbehind is not supported"},
      {R"((a)\1)", "backreference is not supported"},
      {R"((?<x>a)\k<x>)", "backreference (\\k<name>) is not supported"},
      {R"(\bword)", "word boundary \\b is not supported"},
      {R"(a\B)", "\\B is not supported"},
      {R"(\p{L}+)", "property escape"},
      {"(?i)abc", "inline flag"},
      {"a^b", "'^' is only supported at the start"},
      {"a$b", "'$' is only supported at the end"},
      {"(a$)", "'$' is only supported at the end"},
      {"(^a)", "'^' is only supported at the start"},
      {"a**", "nothing to repeat"},
      {"*a", "nothing to repeat"},
      {"a{", "'{' must start a quantifier"},
      {"a{,3}", "'{' must start a quantifier"},
      {"x{3,2}", "out of order"},
      {"[b-a]", "out of order"},
      {"(ab", "missing ')'"},
      {"ab)", "unmatched ')'"},
      {"[ab", "missing ']'"},
      {"ab\\", "lone backslash"},
      {R"(\uD800)", "surrogate"},
      {R"(\u{110000})", "above U+10FFFF"},
      {R"(\xZZ)", "hex digits"},
      {R"(\q)", "unknown escape \\q"},
      {"a{1001}", "max_repeat=1000"},
      {"\xFF", "invalid UTF-8"},
      {"[]", "no string matches"},
  };
  for (const auto& [pattern, expected] : cases) {
    absl::StatusOr<Grammar> g = CompileRegex(pattern);
    ASSERT_FALSE(g.ok()) << pattern;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << pattern;
    EXPECT_NE(g.status().message().find(expected), std::string_view::npos) << pattern << ": " << g.status();
    EXPECT_EQ(g.status().message().rfind("regex: ", 0), 0u) << g.status();
  }
  // The documented example message, offset included.
  EXPECT_EQ(CompileRegex("a(?=b)").status().message(), "regex: lookahead is not supported (at offset 1)");
}

TEST(RegexCompilerTest, LimitsAreEnforcedAndNamed) {
  RegexOptions options;
  options.limits.max_text_bytes = 8;
  EXPECT_NE(CompileRegex("abcdefghij", options).status().message().find("max_text_bytes=8"), std::string_view::npos);
  options = {};
  options.limits.max_rules = 50;
  EXPECT_NE(CompileRegex("a{0,100}", options).status().message().find("max_rules=50"), std::string_view::npos);
  options = {};
  options.limits.max_nesting = 10;
  const std::string deep = std::string(11, '(') + std::string(11, ')');
  EXPECT_NE(CompileRegex(deep, options).status().message().find("max_nesting=10"), std::string_view::npos);
  EXPECT_TRUE(CompileRegex(std::string(10, '(') + "a" + std::string(10, ')'), options).ok());
  // Chained bounded repeats cost the sum of their bounds, not the product.
  absl::StatusOr<Grammar> chained = CompileRegex("((a{0,100}){0,100}){0,100}b");
  ASSERT_TRUE(chained.ok()) << chained.status();
  EXPECT_LT(chained->rules().size(), 400u);
  EXPECT_TRUE(OracleAccepts(*chained, std::string(12, 'a') + "b"));
  EXPECT_FALSE(OracleAccepts(*chained, std::string(12, 'a')));
}

TEST(RegexCompilerTest, AddRegexLeavesTheRestOfTheGrammarAlone) {
  Grammar g;
  const uint32_t root = g.AddRule("root");
  absl::StatusOr<Element> date = AddRegex(&g, R"(\d{4}-\d{2})", "date");
  absl::StatusOr<Element> word = AddRegex(&g, "[a-z]+", "date");  // the name is taken: made unique
  ASSERT_TRUE(date.ok() && word.ok());
  EXPECT_NE(date->index, word->index);
  EXPECT_EQ(g.rules()[date->index].name, "date");
  g.AddAlternative(root, {g.Byte('"'), *date, g.Byte('"'), g.Byte(' '), *word});
  g.set_root(root);
  ASSERT_TRUE(g.CheckIntegrity().ok());
  EXPECT_TRUE(OracleAccepts(g, "\"2024-01\" abc"));
  EXPECT_FALSE(OracleAccepts(g, "\"2024-1\" abc"));
  EXPECT_TRUE(OracleIsPrefix(g, "\"2024-0"));
  EXPECT_FALSE(OracleIsPrefix(g, "\"20x"));
}

}  // namespace
}  // namespace floe::grammar
