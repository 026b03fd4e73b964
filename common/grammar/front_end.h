// What the text front ends (GBNF: ebnf_parser.h, regex: regex_compiler.h)
// share: the limits a caller sets on untrusted grammar text, the
// expression tree both parse into, and its lowering into the grammar IR.
//
// An Expr is a regular expression over characters (code points) plus
// references to grammar rules; lowering turns characters into UTF-8 bytes
// (utf8_ranges.h) and repetition into the IR's helper rules. Lowering
// counts what it adds against the limits, so a hostile `(a{1000}){1000}`
// chain is refused before it costs memory.
//
// Value types and functions on them; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"
#include "common/grammar/utf8_ranges.h"

namespace floe::grammar {

// Bounds on what one piece of grammar text may cost. Exceeding one is
// InvalidArgument naming it. The defaults suit request-supplied text.
struct SourceLimits {
  size_t max_text_bytes = 1 << 20;  // size of the GBNF text / regex pattern
  int max_rules = 1 << 16;          // rules in the resulting grammar
  int max_repeat = 1000;            // m and n in {m}, {m,}, {m,n}
  int max_nesting = 200;            // depth of ( ) groups
  size_t max_elements = 1 << 21;    // elements over all alternatives added
};

struct Expr {
  enum class Kind : uint8_t {
    kChars,   // one character of `chars` (its UTF-8 bytes)
    kBytes,   // one byte of `bytes` (byte-level text: ParseGbnfBytes)
    kLiteral, // the bytes of `text`, in order (a string literal, lowered)
    kSeq,     // `children` in order ("" when there are none)
    kAlt,     // one of `children` (at least one)
    kRepeat,  // children[0], min..max times (max < 0: unbounded)
    kRule,    // the grammar rule `rule`
  };
  Kind kind = Kind::kSeq;
  CodePointSet chars;
  ByteSet bytes;
  std::string text;
  std::vector<Expr> children;
  int min = 0;
  int max = 0;
  uint32_t rule = 0;

  static Expr Chars(CodePointSet set);
  static Expr Bytes(const ByteSet& set);
  static Expr Literal(std::string bytes);
  static Expr Seq(std::vector<Expr> children = {});
  static Expr Alt(std::vector<Expr> children);
  static Expr Repeat(Expr child, int min, int max);
  static Expr Rule(uint32_t rule);
};

// Drops what can never match: character sets left empty (after a regex's
// excluded characters), sequences holding one, alternatives of them,
// repeats of them that need at least one. nullopt when `e` itself can never
// match. Refers to rules as opaque (always matchable).
std::optional<Expr> PruneEmpty(Expr e);

// Lowers expressions into one grammar under one set of limits, naming the
// helper rules it adds after `name` ("item" -> "item-star", "item-alt").
class Lowering {
 public:
  // `what` prefixes limit errors ("regex", "grammar").
  // Rules in `g` before this point do not count against max_rules.
  Lowering(Grammar* g, const SourceLimits& limits, std::string_view what)
      : g_(g), limits_(limits), what_(what), base_rules_(g->rules().size()) {}

  // Appends the elements matching `e` to `out`.
  absl::Status Append(const Expr& e, std::string_view name, Sequence* out);
  // One element matching `e` (a helper rule when it needs several).
  absl::StatusOr<Element> ToElement(const Expr& e, std::string_view name);
  // Makes `e` the body of `rule`: one alternative per branch of a
  // top-level kAlt, else one alternative.
  absl::Status AddBody(uint32_t rule, const Expr& e, std::string_view name);
  // Call once after the last Append/ToElement/AddBody, when every rule they
  // refer to has its alternatives: rewrites each unbounded repeat of an
  // item that can match "" to repeat the item without "" (same language),
  // since `star ::= item star` with a nullable item is left recursion.
  absl::Status Finish();

 private:
  absl::Status Charge(size_t rules, size_t elements);
  void AppendRepeat(Element item, int min, int max, std::string_view name, Sequence* out);

  Grammar* g_;
  SourceLimits limits_;
  std::string what_;
  size_t base_rules_;
  size_t elements_ = 0;
  // (star rule, its item) for every unbounded repeat of a rule reference.
  std::vector<std::pair<uint32_t, uint32_t>> stars_;
};

}  // namespace floe::grammar
