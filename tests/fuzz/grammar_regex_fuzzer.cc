// Fuzzes the grammar text front ends (common/grammar): the regex compiler
// (full match, search, and with a JSON string's excluded characters, as
// the JSON Schema compiler calls it) and the GBNF parser (code-point and
// byte-level dialects). Byte 0 picks the front end; the rest is the text.
//
// Invariants: compiling never crashes; a refusal is InvalidArgument with a
// message of bounded size (never an echo of the input); an accepted text
// gives a grammar that passes CheckIntegrity within its rule limit, whose
// byte sets avoid the excluded characters, whose ToGbnf() dump reads back
// (ParseGbnfBytes) rule for rule, and, when small, whose sampled strings
// are well-formed UTF-8 (code-point front ends) and accepted by the Earley
// oracle.
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "common/grammar/ebnf_parser.h"
#include "common/grammar/regex_compiler.h"
#include "common/grammar/utf8_ranges.h"
#include "tests/common/grammar/grammar_oracle.h"
#include "tests/common/grammar/grammar_sampler.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe::grammar {
namespace {

constexpr size_t kMaxMessage = 400;
constexpr int kMaxRules = 20000;  // below the default, to keep runs fast

bool WellFormedUtf8(std::string_view s) {
  while (!s.empty()) {
    const Utf8Decoded d = DecodeUtf8(s);
    if (d.length == 0) return false;
    s.remove_prefix(static_cast<size_t>(d.length));
  }
  return true;
}

void CheckGrammar(const Grammar& g, const ByteSet& excluded, bool code_points, size_t max_rules) {
  const absl::Status integrity = g.CheckIntegrity();
  FUZZ_CHECK(integrity.ok(), "accepted grammar fails CheckIntegrity: %s", std::string(integrity.message()).c_str());
  FUZZ_CHECK(g.rules().size() <= max_rules, "%zu rules past the limit %zu", g.rules().size(), max_rules);
  for (const ByteSet& set : g.byte_sets())
    for (int b = 0; b < 0x80; ++b)
      FUZZ_CHECK(!(set.Has(static_cast<uint8_t>(b)) && excluded.Has(static_cast<uint8_t>(b))),
                 "a byte set holds the excluded byte 0x%02x", b);
  // The dump reads back with the same rules (helper names included).
  const absl::StatusOr<Grammar> back = ParseGbnfBytes(g.ToGbnf(), GbnfLimits{.max_text_bytes = size_t{1} << 30,
                                                                             .max_rules = 1 << 30,
                                                                             .max_elements = size_t{1} << 40});
  FUZZ_CHECK(back.ok(), "ToGbnf does not read back: %s", std::string(back.status().message()).c_str());
  FUZZ_CHECK(back->rules().size() == g.rules().size(), "dump has %zu rules, grammar %zu", back->rules().size(),
             g.rules().size());
  if (g.rules().size() > 300) return;  // sampling and Earley cost grow with the grammar
  const testing::GrammarSampler sampler(g);
  std::mt19937 rng(static_cast<uint32_t>(g.rules().size()));
  for (int i = 0; i < 4; ++i) {
    const std::optional<std::string> s = sampler.Sample(rng, 8);
    if (!s) break;  // a GBNF root may derive nothing
    if (s->size() > 64) continue;  // Earley is cubic in the length on ambiguous grammars
    FUZZ_CHECK(!code_points || WellFormedUtf8(*s), "a derived string is malformed UTF-8");
    FUZZ_CHECK(testing::OracleAccepts(g, *s), "the oracle rejects a derived string");
  }
}

void CheckRefusal(const absl::Status& status) {
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, "refusal is not InvalidArgument: %s",
             status.ToString().c_str());
  FUZZ_CHECK(status.message().size() <= kMaxMessage, "error message of %zu bytes", status.message().size());
}

}  // namespace
}  // namespace floe::grammar

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe::grammar;
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 5;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode <= 2) {
    RegexOptions options;
    options.limits.max_rules = kMaxRules;
    options.match = mode == 1 ? RegexOptions::Match::kSearch : RegexOptions::Match::kFull;
    if (mode == 2) {
      // What a JSON string cannot hold raw.
      options.excluded = ByteSet::Range(0, 0x1F);
      options.excluded.Add('"');
      options.excluded.Add('\\');
    }
    const absl::StatusOr<Grammar> g = CompileRegex(text, options);
    if (!g.ok()) {
      CheckRefusal(g.status());
      return 0;
    }
    // The root rule plus at most max_rules helpers.
    CheckGrammar(*g, options.excluded, /*code_points=*/true, kMaxRules + 1);
    return 0;
  }
  GbnfLimits limits;
  limits.max_rules = kMaxRules;
  const absl::StatusOr<Grammar> g = mode == 3 ? ParseGbnf(text, limits) : ParseGbnfBytes(text, limits);
  if (!g.ok()) {
    CheckRefusal(g.status());
    return 0;
  }
  // The text's own rules (at most max_rules) plus at most max_rules helpers.
  CheckGrammar(*g, ByteSet(), /*code_points=*/mode == 3, 2 * kMaxRules);
  return 0;
}
