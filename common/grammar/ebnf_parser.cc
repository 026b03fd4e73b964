#include "common/grammar/ebnf_parser.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace floe::grammar {
namespace {

// Error messages quote user text (rule names) at most this long, so a
// hostile grammar cannot make an error as large as itself.
constexpr size_t kMaxEcho = 48;

std::string Echo(std::string_view s) {
  return s.size() <= kMaxEcho ? std::string(s) : std::string(s.substr(0, kMaxEcho)) + "...";
}

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

bool IsSurrogate(uint32_t c) { return c >= kSurrogateFirst && c <= kSurrogateLast; }

// Recursive descent over the text; rules become Exprs first (so every
// name is known before lowering: rule ids are the names' first-appearance
// order) and are lowered once the whole text has parsed.
class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GbnfLimits& limits, bool bytes)
      : text_(text), limits_(limits), bytes_(bytes) {}

  absl::StatusOr<Grammar> Parse();

 private:
  struct Symbol {
    std::string name;
    size_t first_use = 0;
    std::optional<size_t> defined_at;
    Expr body;
  };

  std::string Where(size_t pos) const;
  absl::Status Error(size_t pos, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("grammar: line ", Where(pos), ": ", what));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  void SkipSpace(bool newlines);
  std::string_view ParseName();
  uint32_t SymbolId(std::string_view name, size_t pos);

  absl::StatusOr<Expr> ParseAlternates(bool nested, int depth);
  absl::StatusOr<Expr> ParseSequence(bool nested, int depth);
  absl::StatusOr<Expr> ParseLiteral();
  absl::StatusOr<Expr> ParseClass();
  absl::StatusOr<uint32_t> ParseChar();
  absl::StatusOr<uint32_t> ParseHex(int digits);
  absl::Status ParseQuantifier(Expr* item);
  absl::StatusOr<int> ParseBound();
  Expr SetExpr(const CodePointSet& set, bool negate) const;

  std::string_view text_;
  GbnfLimits limits_;
  bool bytes_;
  size_t pos_ = 0;
  std::vector<Symbol> symbols_;
  absl::flat_hash_map<std::string, uint32_t> by_name_;
};

std::string GbnfParser::Where(size_t pos) const {
  int line = 1, column = 1;
  for (size_t i = 0; i < pos && i < text_.size(); ++i) {
    if (text_[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<uint8_t>(text_[i]) & 0xC0) != 0x80 || bytes_) {
      ++column;  // columns count characters, not UTF-8 continuation bytes
    }
  }
  return absl::StrCat(line, ":", column);
}

void GbnfParser::SkipSpace(bool newlines) {
  while (!AtEnd()) {
    const char c = Peek();
    if (c == ' ' || c == '\t') {
      ++pos_;
    } else if (c == '#') {
      while (!AtEnd() && Peek() != '\n') ++pos_;
    } else if ((c == '\n' || c == '\r') && newlines) {
      ++pos_;
    } else {
      return;
    }
  }
}

std::string_view GbnfParser::ParseName() {
  const size_t start = pos_;
  while (!AtEnd() && IsNameChar(Peek())) ++pos_;
  return text_.substr(start, pos_ - start);
}

uint32_t GbnfParser::SymbolId(std::string_view name, size_t pos) {
  auto [it, added] = by_name_.try_emplace(std::string(name), static_cast<uint32_t>(symbols_.size()));
  if (added) symbols_.push_back(Symbol{std::string(name), pos, std::nullopt, Expr::Seq()});
  return it->second;
}

absl::StatusOr<Grammar> GbnfParser::Parse() {
  if (text_.size() > limits_.max_text_bytes)
    return absl::InvalidArgumentError(absl::StrCat("grammar: the text is ", text_.size(),
                                                   " bytes, above max_text_bytes=", limits_.max_text_bytes));
  while (true) {
    SkipSpace(true);
    if (AtEnd()) break;
    const size_t name_pos = pos_;
    const std::string_view name = ParseName();
    if (name.empty()) return Error(pos_, "expected a rule name");
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=")
      return Error(pos_, absl::StrCat("expected '::=' after the rule name '", Echo(name), "'"));
    pos_ += 3;
    SkipSpace(true);
    FLOE_ASSIGN_OR_RETURN(Expr body, ParseAlternates(/*nested=*/false, 0));
    if (!AtEnd() && Peek() != '\n' && Peek() != '\r')
      return Error(pos_, absl::StrCat("expected an item, '|' or the end of the line, found '",
                                      std::string(1, Peek()), "'"));
    const uint32_t id = SymbolId(name, name_pos);
    Symbol& symbol = symbols_[id];
    if (symbol.defined_at)
      return Error(name_pos, absl::StrCat("rule '", Echo(name), "' is defined twice (first at line ",
                                          Where(*symbol.defined_at), ")"));
    symbol.defined_at = name_pos;
    symbol.body = std::move(body);
  }
  auto root = by_name_.find("root");
  if (root == by_name_.end() || !symbols_[root->second].defined_at)
    return absl::InvalidArgumentError("grammar: no rule named 'root' (the start rule)");
  for (const Symbol& s : symbols_)
    if (!s.defined_at) return Error(s.first_use, absl::StrCat("undefined rule '", Echo(s.name), "'"));
  if (symbols_.size() > static_cast<size_t>(limits_.max_rules))
    return absl::InvalidArgumentError(absl::StrCat("grammar: ", symbols_.size(),
                                                   " rules, above max_rules=", limits_.max_rules));

  Grammar g;
  Lowering lowering(&g, limits_, "grammar");
  for (const Symbol& s : symbols_) g.AddRule(s.name);  // ids == symbol ids: no clashes yet
  g.set_root(root->second);
  for (uint32_t id = 0; id < symbols_.size(); ++id)
    FLOE_RETURN_IF_ERROR(lowering.AddBody(id, symbols_[id].body, symbols_[id].name));
  FLOE_RETURN_IF_ERROR(lowering.Finish());
  if (absl::Status s = g.CheckIntegrity(); !s.ok()) {
    // A left-recursion cycle names every rule on it: cap what we echo.
    constexpr size_t kMaxDetail = 300;
    std::string detail(s.message().substr(0, kMaxDetail));
    if (s.message().size() > kMaxDetail) detail += "...";
    return absl::InvalidArgumentError(absl::StrCat("grammar: ", detail));
  }
  return g;
}

absl::StatusOr<Expr> GbnfParser::ParseAlternates(bool nested, int depth) {
  std::vector<Expr> alternatives;
  FLOE_ASSIGN_OR_RETURN(Expr first, ParseSequence(nested, depth));
  alternatives.push_back(std::move(first));
  while (true) {
    if (Peek() == '|') {
      ++pos_;
      SkipSpace(true);
      FLOE_ASSIGN_OR_RETURN(Expr next, ParseSequence(nested, depth));
      alternatives.push_back(std::move(next));
      continue;
    }
    if (!nested) {
      // A rule may continue on a line that starts with '|'.
      const size_t save = pos_;
      SkipSpace(true);
      if (Peek() == '|') continue;
      pos_ = save;
    }
    break;
  }
  return Expr::Alt(std::move(alternatives));
}

absl::StatusOr<Expr> GbnfParser::ParseSequence(bool nested, int depth) {
  std::vector<Expr> items;
  bool quantified = false;
  while (!AtEnd()) {
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (items.empty() || quantified)
        return Error(pos_, absl::StrCat("expected an item before '", std::string(1, c), "'",
                                        quantified ? " (one quantifier per item; use parentheses)" : ""));
      FLOE_RETURN_IF_ERROR(ParseQuantifier(&items.back()));
      quantified = true;
      SkipSpace(nested);
      continue;
    }
    quantified = false;
    if (c == '"') {
      FLOE_ASSIGN_OR_RETURN(Expr literal, ParseLiteral());
      items.push_back(std::move(literal));
    } else if (c == '[') {
      FLOE_ASSIGN_OR_RETURN(Expr set, ParseClass());
      items.push_back(std::move(set));
    } else if (c == '.') {
      ++pos_;
      items.push_back(bytes_ ? Expr::Bytes(ByteSet::All()) : Expr::Chars(CodePointSet::All()));
    } else if (IsNameChar(c)) {
      const size_t at = pos_;
      items.push_back(Expr::Rule(SymbolId(ParseName(), at)));
    } else if (c == '(') {
      const size_t open = pos_;
      if (depth + 1 > limits_.max_nesting)
        return Error(pos_, absl::StrCat("groups nest deeper than max_nesting=", limits_.max_nesting));
      ++pos_;
      SkipSpace(true);
      FLOE_ASSIGN_OR_RETURN(Expr group, ParseAlternates(/*nested=*/true, depth + 1));
      if (Peek() != ')')
        return Error(pos_, absl::StrCat("expected ')' to close the group opened at line ", Where(open)));
      ++pos_;
      items.push_back(std::move(group));
    } else {
      break;
    }
    SkipSpace(nested);
  }
  if (items.size() == 1) return std::move(items[0]);
  return Expr::Seq(std::move(items));
}

absl::StatusOr<uint32_t> GbnfParser::ParseHex(int digits) {
  uint32_t value = 0;
  for (int i = 0; i < digits; ++i, ++pos_) {
    const char c = Peek();
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)))
      return Error(pos_, absl::StrCat("expected ", digits, " hex digits in the escape"));
    value = value * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return value;
}

absl::StatusOr<uint32_t> GbnfParser::ParseChar() {
  const size_t start = pos_;
  if (Peek() != '\\') {
    if (bytes_) return static_cast<uint8_t>(text_[pos_++]);
    const Utf8Decoded d = DecodeUtf8(text_.substr(pos_));
    if (d.length == 0) return Error(pos_, "invalid UTF-8");
    pos_ += static_cast<size_t>(d.length);
    return d.code_point;
  }
  ++pos_;
  if (AtEnd()) return Error(start, "expected an escape after '\\'");
  const char e = text_[pos_++];
  std::optional<uint32_t> value;
  switch (e) {
    case 'x':
    case 'u':
    case 'U': {
      FLOE_ASSIGN_OR_RETURN(value, ParseHex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
      break;
    }
    case 'n': return uint32_t{'\n'};
    case 'r': return uint32_t{'\r'};
    case 't': return uint32_t{'\t'};
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '^':
      return static_cast<uint32_t>(e);
    default:
      return Error(start, absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
  }
  if (bytes_ && *value > 0xFF) return Error(start, "escape above \\xFF in a byte-level grammar");
  if (*value > kMaxCodePoint) return Error(start, "code point above U+10FFFF");
  return *value;
}

Expr GbnfParser::SetExpr(const CodePointSet& set, bool negate) const {
  if (!bytes_) return Expr::Chars(negate ? set.Complement() : set);
  ByteSet bytes;
  for (const CodePointRange& r : set.ranges())
    if (r.lo <= 0xFF) bytes.AddRange(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(std::min(r.hi, 0xFFu)));
  return Expr::Bytes(negate ? bytes.Complement() : bytes);
}

absl::StatusOr<Expr> GbnfParser::ParseLiteral() {
  const size_t open = pos_++;
  std::string bytes;
  while (true) {
    if (AtEnd()) return Error(open, "unterminated string literal (expected '\"')");
    if (Peek() == '"') break;
    const size_t at = pos_;
    FLOE_ASSIGN_OR_RETURN(const uint32_t c, ParseChar());
    if (bytes_) {
      bytes.push_back(static_cast<char>(c));  // ParseChar keeps byte-level values <= 0xFF
    } else if (IsSurrogate(c)) {
      return Error(at, "a surrogate code point has no UTF-8 encoding");
    } else {
      AppendUtf8(c, &bytes);
    }
  }
  ++pos_;
  return Expr::Literal(std::move(bytes));
}

absl::StatusOr<Expr> GbnfParser::ParseClass() {
  const size_t open = pos_++;
  const bool negate = Peek() == '^';
  if (negate) ++pos_;
  std::vector<CodePointRange> ranges;
  while (true) {
    if (AtEnd()) return Error(open, "unterminated character class (expected ']')");
    if (Peek() == ']') break;
    const size_t at = pos_;
    FLOE_ASSIGN_OR_RETURN(const uint32_t lo, ParseChar());
    uint32_t hi = lo;
    if (Peek() == '-' && pos_ + 1 < text_.size() && Peek(1) != ']') {
      ++pos_;
      FLOE_ASSIGN_OR_RETURN(hi, ParseChar());
      if (hi < lo) return Error(at, "character range out of order (the end is below the start)");
    } else if (!bytes_ && IsSurrogate(lo)) {
      return Error(at, "a surrogate code point has no UTF-8 encoding");
    }
    ranges.push_back({lo, hi});  // surrogates inside a range are skipped: not characters
  }
  ++pos_;
  return SetExpr(CodePointSet::FromRanges(std::move(ranges)), negate);
}

absl::StatusOr<int> GbnfParser::ParseBound() {
  const size_t start = pos_;
  int64_t value = 0;
  while (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
    value = std::min<int64_t>(value * 10 + (Peek() - '0'), int64_t{1} << 40);
    ++pos_;
  }
  if (pos_ == start) return Error(pos_, "expected a number in the repetition");
  if (value > limits_.max_repeat)
    return Error(start, absl::StrCat("repetition bound ", Echo(text_.substr(start, pos_ - start)),
                                     " is above max_repeat=", limits_.max_repeat));
  return static_cast<int>(value);
}

absl::Status GbnfParser::ParseQuantifier(Expr* item) {
  const size_t at = pos_;
  const char c = text_[pos_++];
  int min = 0, max = -1;
  if (c == '+') {
    min = 1;
  } else if (c == '?') {
    max = 1;
  } else if (c == '{') {
    SkipSpace(false);
    FLOE_ASSIGN_OR_RETURN(min, ParseBound());
    SkipSpace(false);
    max = min;
    if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      max = -1;
      if (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
        FLOE_ASSIGN_OR_RETURN(max, ParseBound());
        SkipSpace(false);
      }
    }
    if (Peek() != '}') return Error(pos_, "expected '}' to close the repetition");
    ++pos_;
    if (max >= 0 && max < min) return Error(at, "repetition {m,n} needs m <= n");
  }
  *item = Expr::Repeat(std::move(*item), min, max);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Grammar> ParseGbnf(std::string_view text, const GbnfLimits& limits) {
  return GbnfParser(text, limits, /*bytes=*/false).Parse();
}

absl::StatusOr<Grammar> ParseGbnfBytes(std::string_view text, const GbnfLimits& limits) {
  return GbnfParser(text, limits, /*bytes=*/true).Parse();
}

}  // namespace floe::grammar
