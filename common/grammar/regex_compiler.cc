#include "common/grammar/regex_compiler.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace floe::grammar {
namespace {

// One class atom or escape: a single character, or a class escape's set
// (\d, \W, ...), which cannot bound a range.
struct ClassAtom {
  CodePointSet set;
  bool is_class = false;
  uint32_t code_point = 0;  // when !is_class
};

CodePointSet Digits() { return CodePointSet::Range('0', '9'); }

CodePointSet WordChars() {
  CodePointSet s = CodePointSet::Range('a', 'z');
  s.Add('A', 'Z');
  s.AddAll(Digits());
  s.Add('_');
  return s;
}

// ECMAScript WhiteSpace and LineTerminator.
CodePointSet SpaceChars() {
  CodePointSet s = CodePointSet::Range('\t', '\r');
  for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) s.Add(c);
  s.Add(0x2000, 0x200A);
  return s;
}

// ECMAScript `.`: everything but the line terminators.
CodePointSet DotChars() {
  CodePointSet s;
  for (uint32_t c : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) s.Add(c);
  return s.Complement();
}

bool IsHighSurrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDBFF; }
bool IsLowSurrogate(uint32_t c) { return c >= 0xDC00 && c <= 0xDFFF; }

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const RegexOptions& options) : text_(pattern), options_(options) {}

  absl::StatusOr<Expr> Parse();

 private:
  absl::Status Error(size_t pos, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: ", what, " (at offset ", pos, ")"));
  }
  absl::Status Unsupported(size_t pos, absl::string_view what) const {
    return Error(pos, absl::StrCat(what, " is not supported"));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  // A character set the pattern may match, less the excluded characters.
  Expr Chars(CodePointSet set) const {
    set.RemoveAscii(options_.excluded);
    return Expr::Chars(std::move(set));
  }

  absl::StatusOr<Expr> ParseTopAlternative();
  absl::StatusOr<Expr> ParseDisjunction(int depth);
  absl::StatusOr<std::vector<Expr>> ParseConcat(int depth, bool* end_anchor);
  absl::StatusOr<Expr> ParseGroup(int depth);
  absl::StatusOr<Expr> ParseClass();
  absl::StatusOr<ClassAtom> ParseEscape(bool in_class);
  absl::StatusOr<ClassAtom> ParseClassAtom();
  absl::StatusOr<uint32_t> ParseHex(size_t digits);
  absl::StatusOr<uint32_t> ParseUnicodeEscape(size_t start);
  absl::StatusOr<uint32_t> ParseChar();
  absl::Status ParseQuantifier(Expr* atom);
  absl::StatusOr<int> ParseBound();

  std::string_view text_;
  const RegexOptions& options_;
  size_t pos_ = 0;
};

absl::StatusOr<Expr> RegexParser::Parse() {
  if (text_.size() > options_.limits.max_text_bytes)
    return absl::InvalidArgumentError(absl::StrCat("regex: the pattern is ", text_.size(),
                                                   " bytes, above max_text_bytes=",
                                                   options_.limits.max_text_bytes));
  std::vector<Expr> alternatives;
  while (true) {
    FLOE_ASSIGN_OR_RETURN(Expr alt, ParseTopAlternative());
    alternatives.push_back(std::move(alt));
    if (AtEnd()) break;
    if (Peek() == ')') return Error(pos_, "unmatched ')'");
    ++pos_;  // '|'
  }
  return Expr::Alt(std::move(alternatives));
}

absl::StatusOr<Expr> RegexParser::ParseTopAlternative() {
  // Anchors are no-ops under full-match semantics; under search semantics
  // their absence lets any text in before or after.
  const bool start_anchor = Peek() == '^';
  if (start_anchor) ++pos_;
  bool end_anchor = false;
  FLOE_ASSIGN_OR_RETURN(std::vector<Expr> items, ParseConcat(0, &end_anchor));
  if (options_.match == RegexOptions::Match::kSearch) {
    const Expr any = Expr::Repeat(Chars(CodePointSet::All()), 0, -1);
    if (!start_anchor) items.insert(items.begin(), any);
    if (!end_anchor) items.push_back(any);
  }
  return Expr::Seq(std::move(items));
}

absl::StatusOr<Expr> RegexParser::ParseDisjunction(int depth) {
  std::vector<Expr> alternatives;
  while (true) {
    FLOE_ASSIGN_OR_RETURN(std::vector<Expr> items, ParseConcat(depth, nullptr));
    alternatives.push_back(Expr::Seq(std::move(items)));
    if (Peek() != '|') break;
    ++pos_;
  }
  return Expr::Alt(std::move(alternatives));
}

// Items up to the end, '|' or ')'. `end_anchor` is null inside groups,
// where '$' is refused.
absl::StatusOr<std::vector<Expr>> RegexParser::ParseConcat(int depth, bool* end_anchor) {
  std::vector<Expr> items;
  while (!AtEnd()) {
    const size_t at = pos_;
    const char c = Peek();
    if (c == '|' || c == ')') break;
    Expr atom;
    switch (c) {
      case '^':
        return Error(at, "'^' is only supported at the start of the pattern or of a top-level alternative");
      case '$':
        if (end_anchor == nullptr || (pos_ + 1 < text_.size() && Peek(1) != '|'))
          return Error(at, "'$' is only supported at the end of the pattern or of a top-level alternative");
        ++pos_;
        *end_anchor = true;
        return items;
      case '*':
      case '+':
      case '?':
      case '{':
        return Error(at, absl::StrCat("nothing to repeat before '", std::string(1, c),
                                      "' (write \\", std::string(1, c), " for the character)"));
      case '(': {
        FLOE_ASSIGN_OR_RETURN(atom, ParseGroup(depth));
        break;
      }
      case '[': {
        FLOE_ASSIGN_OR_RETURN(atom, ParseClass());
        break;
      }
      case '.':
        ++pos_;
        atom = Chars(DotChars());
        break;
      case '\\': {
        FLOE_ASSIGN_OR_RETURN(ClassAtom escape, ParseEscape(/*in_class=*/false));
        atom = Chars(escape.is_class ? std::move(escape.set) : CodePointSet::Of(escape.code_point));
        break;
      }
      default: {
        FLOE_ASSIGN_OR_RETURN(const uint32_t cp, ParseChar());
        atom = Chars(CodePointSet::Of(cp));
      }
    }
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{') {
      FLOE_RETURN_IF_ERROR(ParseQuantifier(&atom));
      if (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')
        return Error(pos_, absl::StrCat("nothing to repeat before '", std::string(1, Peek()),
                                        "' (one quantifier per item; use a group)"));
    }
    items.push_back(std::move(atom));
  }
  return items;
}

absl::StatusOr<Expr> RegexParser::ParseGroup(int depth) {
  const size_t open = pos_++;
  if (depth + 1 > options_.limits.max_nesting)
    return Error(open, absl::StrCat("groups nest deeper than max_nesting=", options_.limits.max_nesting));
  if (Peek() == '?') {
    const char kind = Peek(1);
    const char next = Peek(2);
    if (kind == ':') {
      pos_ += 2;
    } else if (kind == '=') {
      return Unsupported(open, "lookahead");
    } else if (kind == '!') {
      return Unsupported(open, "negative lookahead");
    } else if (kind == '<' && next == '=') {
      return Unsupported(open, "lookbehind");
    } else if (kind == '<' && next == '!') {
      return Unsupported(open, "negative lookbehind");
    } else if (kind == '<') {
      // A named group: the name is only for backreferences, which we refuse.
      pos_ += 2;
      const size_t name_start = pos_;
      while (!AtEnd() && (absl::ascii_isalnum(static_cast<unsigned char>(Peek())) || Peek() == '_' || Peek() == '$'))
        ++pos_;
      if (pos_ == name_start || absl::ascii_isdigit(static_cast<unsigned char>(text_[name_start])) ||
          Peek() != '>')
        return Error(name_start, "expected a group name of [A-Za-z_$][A-Za-z0-9_$]* and '>'");
      ++pos_;
    } else {
      return Unsupported(open, "a group modifier or inline flag after '(?'");
    }
  }
  FLOE_ASSIGN_OR_RETURN(Expr inner, ParseDisjunction(depth + 1));
  if (Peek() != ')') return Error(open, "missing ')' for this group");
  ++pos_;
  return inner;
}

absl::StatusOr<Expr> RegexParser::ParseClass() {
  const size_t open = pos_++;
  const bool negate = Peek() == '^';
  if (negate) ++pos_;
  // Collected, then merged once (CodePointSet::FromRanges).
  std::vector<CodePointRange> ranges;
  auto add = [&ranges](const ClassAtom& atom) {
    if (!atom.is_class) ranges.push_back({atom.code_point, atom.code_point});
    else ranges.insert(ranges.end(), atom.set.ranges().begin(), atom.set.ranges().end());
  };
  while (true) {
    if (AtEnd()) return Error(open, "missing ']' for this class");
    if (Peek() == ']') break;
    const size_t at = pos_;
    FLOE_ASSIGN_OR_RETURN(ClassAtom lo, ParseClassAtom());
    if (lo.is_class || Peek() != '-' || Peek(1) == ']' || pos_ + 1 >= text_.size()) {
      add(lo);
      continue;
    }
    ++pos_;  // '-'
    FLOE_ASSIGN_OR_RETURN(ClassAtom hi, ParseClassAtom());
    if (hi.is_class) {
      // [a-\d]: Annex B reads the '-' as a character.
      add(lo);
      ranges.push_back({'-', '-'});
      add(hi);
      continue;
    }
    if (hi.code_point < lo.code_point) return Error(at, "class range out of order (the end is below the start)");
    ranges.push_back({lo.code_point, hi.code_point});
  }
  ++pos_;
  const CodePointSet set = CodePointSet::FromRanges(std::move(ranges));
  return Chars(negate ? set.Complement() : set);
}

absl::StatusOr<ClassAtom> RegexParser::ParseClassAtom() {
  if (Peek() == '\\') return ParseEscape(/*in_class=*/true);
  FLOE_ASSIGN_OR_RETURN(const uint32_t cp, ParseChar());
  return ClassAtom{{}, false, cp};
}

absl::StatusOr<uint32_t> RegexParser::ParseChar() {
  const Utf8Decoded d = DecodeUtf8(text_.substr(pos_));
  if (d.length == 0) return Error(pos_, "invalid UTF-8");
  pos_ += static_cast<size_t>(d.length);
  return d.code_point;
}

absl::StatusOr<uint32_t> RegexParser::ParseHex(size_t digits) {
  uint32_t value = 0;
  for (size_t i = 0; i < digits; ++i, ++pos_) {
    const char c = Peek();
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)))
      return Error(pos_, absl::StrCat("expected ", digits, " hex digits in the escape"));
    value = value * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return value;
}

// After "\u": HHHH (a surrogate pair \uHHHH\uHHHH combines) or {H...}.
absl::StatusOr<uint32_t> RegexParser::ParseUnicodeEscape(size_t start) {
  if (Peek() == '{') {
    ++pos_;
    uint32_t value = 0;
    const size_t digits = pos_;
    while (absl::ascii_isxdigit(static_cast<unsigned char>(Peek()))) {
      const char c = Peek();
      value = std::min<uint32_t>(value * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10),
                                 kMaxCodePoint + 1);
      ++pos_;
    }
    if (pos_ == digits || Peek() != '}') return Error(start, "expected \\u{hex digits}");
    ++pos_;
    if (value > kMaxCodePoint) return Error(start, "code point above U+10FFFF");
    if (value >= kSurrogateFirst && value <= kSurrogateLast)
      return Error(start, "a lone surrogate has no UTF-8 encoding");
    return value;
  }
  FLOE_ASSIGN_OR_RETURN(uint32_t value, ParseHex(4));
  if (IsHighSurrogate(value) && Peek() == '\\' && Peek(1) == 'u') {
    const size_t save = pos_;
    pos_ += 2;
    absl::StatusOr<uint32_t> low = ParseHex(4);
    if (low.ok() && IsLowSurrogate(*low)) return 0x10000 + ((value - 0xD800) << 10) + (*low - 0xDC00);
    pos_ = save;
  }
  if (value >= kSurrogateFirst && value <= kSurrogateLast)
    return Error(start, "a lone surrogate has no UTF-8 encoding");
  return value;
}

absl::StatusOr<ClassAtom> RegexParser::ParseEscape(bool in_class) {
  const size_t start = pos_++;
  if (AtEnd()) return Error(start, "the pattern ends with a lone backslash");
  const char c = text_[pos_++];
  auto set = [](CodePointSet s) { return ClassAtom{std::move(s), true, 0}; };
  auto one = [](uint32_t cp) { return ClassAtom{{}, false, cp}; };
  switch (c) {
    case 'd': return set(Digits());
    case 'D': return set(Digits().Complement());
    case 'w': return set(WordChars());
    case 'W': return set(WordChars().Complement());
    case 's': return set(SpaceChars());
    case 'S': return set(SpaceChars().Complement());
    case 'n': return one('\n');
    case 'r': return one('\r');
    case 't': return one('\t');
    case 'f': return one('\f');
    case 'v': return one('\v');
    case 'b':
      if (in_class) return one('\b');
      return Unsupported(start, "the word boundary \\b");
    case 'B': return Unsupported(start, "the non-word-boundary \\B");
    case '0':
      if (absl::ascii_isdigit(static_cast<unsigned char>(Peek())))
        return Unsupported(start, "an octal escape or backreference");
      return one(0);
    case 'k': return Unsupported(start, "a backreference (\\k<name>)");
    case 'p':
    case 'P': return Unsupported(start, "a Unicode property escape (\\p{...})");
    case 'x': {
      FLOE_ASSIGN_OR_RETURN(const uint32_t v, ParseHex(2));
      return one(v);
    }
    case 'u': {
      FLOE_ASSIGN_OR_RETURN(const uint32_t v, ParseUnicodeEscape(start));
      return one(v);
    }
    case 'c': {
      const char letter = Peek();
      if (!absl::ascii_isalpha(static_cast<unsigned char>(letter)))
        return Error(start, "expected a letter after \\c");
      ++pos_;
      return one(static_cast<uint32_t>(letter) % 32);
    }
    default:
      break;
  }
  if (c >= '1' && c <= '9') return Unsupported(start, "a backreference");
  if (absl::ascii_isalnum(static_cast<unsigned char>(c)))
    return Error(start, absl::StrCat("unknown escape \\", std::string(1, c)));
  if (static_cast<uint8_t>(c) < 0x80) return one(static_cast<uint8_t>(c));
  // An escaped non-ASCII character is itself.
  pos_ = start + 1;
  FLOE_ASSIGN_OR_RETURN(const uint32_t cp, ParseChar());
  return one(cp);
}

absl::StatusOr<int> RegexParser::ParseBound() {
  const size_t start = pos_;
  int64_t value = 0;
  while (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
    value = std::min<int64_t>(value * 10 + (Peek() - '0'), int64_t{1} << 40);
    ++pos_;
  }
  if (value > options_.limits.max_repeat)
    return Error(start, absl::StrCat("repetition bound above max_repeat=", options_.limits.max_repeat));
  return static_cast<int>(value);
}

absl::Status RegexParser::ParseQuantifier(Expr* atom) {
  const size_t at = pos_;
  const char c = text_[pos_++];
  int min = 0, max = -1;
  if (c == '+') {
    min = 1;
  } else if (c == '?') {
    max = 1;
  } else if (c == '{') {
    const char* kShape = "'{' must start a quantifier {m}, {m,} or {m,n} (write \\{ for the character)";
    if (!absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) return Error(at, kShape);
    FLOE_ASSIGN_OR_RETURN(min, ParseBound());
    max = min;
    if (Peek() == ',') {
      ++pos_;
      max = -1;
      if (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
        FLOE_ASSIGN_OR_RETURN(max, ParseBound());
      }
    }
    if (Peek() != '}') return Error(at, kShape);
    ++pos_;
    if (max >= 0 && max < min) return Error(at, "numbers out of order in the {m,n} quantifier");
  }
  if (Peek() == '?') ++pos_;  // lazy: the same language
  *atom = Expr::Repeat(std::move(*atom), min, max);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Element> AddRegex(Grammar* g, std::string_view pattern, std::string_view name,
                                 const RegexOptions& options) {
  FLOE_ASSIGN_OR_RETURN(Expr expr, RegexParser(pattern, options).Parse());
  std::optional<Expr> pruned = PruneEmpty(std::move(expr));
  if (!pruned)
    return absl::InvalidArgumentError(options.excluded.Empty()
                                          ? "regex: no string matches the pattern"
                                          : "regex: every match of the pattern needs an excluded character");
  Lowering lowering(g, options.limits, "regex");
  const uint32_t rule = g->AddRule(name);
  FLOE_RETURN_IF_ERROR(lowering.AddBody(rule, *pruned, name));
  FLOE_RETURN_IF_ERROR(lowering.Finish());
  return Grammar::Ref(rule);
}

absl::StatusOr<Grammar> CompileRegex(std::string_view pattern, const RegexOptions& options) {
  Grammar g;
  FLOE_ASSIGN_OR_RETURN(const Element root, AddRegex(&g, pattern, "root", options));
  g.set_root(root.index);
  if (absl::Status s = g.CheckIntegrity(); !s.ok())
    return absl::InternalError(absl::StrCat("regex: compiled grammar is malformed: ", s.message()));
  return g;
}

}  // namespace floe::grammar
