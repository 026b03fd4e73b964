#include "common/grammar/json_number_grammar.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <utility>
#include <vector>

namespace floe::grammar {
namespace {

bool AllOf(std::string_view s, char c) {
  return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; });
}

// Canonical digit strings (no leading zeros) compare by length, then text.
int CompareDigits(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

std::string IncrementDigits(std::string a) {
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != '9') {
      ++a[i];
      return a;
    }
    a[i] = '0';
  }
  return "1" + a;
}

// a - 1 for a > 0.
std::string DecrementDigits(std::string a) {
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != '0') {
      --a[i];
      break;
    }
    a[i] = '9';
  }
  if (a.size() > 1 && a[0] == '0') a.erase(0, 1);
  return a;
}

Decimal Normalized(Decimal d) {
  while (d.integer.size() > 1 && d.integer[0] == '0') d.integer.erase(0, 1);
  if (d.integer.empty()) d.integer = "0";
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  if (d.integer == "0" && d.fraction.empty()) d.negative = false;
  return d;
}

// Builds the digit-string grammars of one range; every helper rule is
// named after the range's kind so ToGbnf() stays readable.
class RangeBuilder {
 public:
  explicit RangeBuilder(Grammar* g) : g_(g) {}

  Element Digit(char lo = '0', char hi = '9') {
    return g_->Bytes(ByteSet::Range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
  }
  Element AnyDigits() { return g_->Star(Digit(), "digits"); }

  // Canonical non-negative integers in [lo, hi] (hi nullopt: unbounded);
  // nullopt when empty.
  std::optional<Element> Integers(const std::string& lo, const std::optional<std::string>& hi) {
    if (hi && CompareDigits(lo, *hi) > 0) return std::nullopt;
    std::vector<Sequence> alts;
    const size_t last = hi ? hi->size() : lo.size();
    for (size_t len = lo.size(); len <= last; ++len) {
      const std::string a = len == lo.size() ? lo : "1" + std::string(len - 1, '0');
      const std::string b = hi && len == hi->size() ? *hi : std::string(len, '9');
      for (Sequence& s : SameLength(a, b)) alts.push_back(std::move(s));
    }
    if (!hi) {
      // Every number with more digits than lo.
      Sequence longer{Digit('1', '9')};
      for (size_t i = 0; i < lo.size(); ++i) longer.push_back(Digit());
      longer.push_back(AnyDigits());
      alts.push_back(std::move(longer));
    }
    return Choose(std::move(alts), "int-range");
  }

  // Decimals (canonical integer part, optional "." and 1+ digits) in
  // [lo, hi], both non-negative; hi nullopt: unbounded.
  std::optional<Element> Decimals(const Decimal& lo, const std::optional<Decimal>& hi) {
    if (hi && CompareDecimal(lo, *hi) > 0) return std::nullopt;
    std::vector<Sequence> alts;
    auto whole = [&](const std::string& a, const std::optional<std::string>& b) {
      if (std::optional<Element> ints = Integers(a, b)) alts.push_back({*ints, AnyFraction()});
    };
    auto edge = [&](const std::string& integer, Element fraction) {
      Sequence s = g_->Literal(integer);
      s.push_back(fraction);
      alts.push_back(std::move(s));
    };
    if (!hi) {
      if (lo.fraction.empty()) {
        whole(lo.integer, std::nullopt);
      } else {
        whole(IncrementDigits(lo.integer), std::nullopt);
        edge(lo.integer, FractionPart(FractionAtLeast(lo.fraction, true), false));
      }
    } else if (lo.integer == hi->integer) {
      edge(lo.integer, FractionPart(FractionBetween(lo.fraction, hi->fraction, true), lo.fraction.empty()));
    } else {
      std::string mid_lo = lo.integer;
      if (!lo.fraction.empty()) {
        edge(lo.integer, FractionPart(FractionAtLeast(lo.fraction, true), false));
        mid_lo = IncrementDigits(lo.integer);
      }
      const std::string mid_hi = DecrementDigits(hi->integer);
      if (CompareDigits(mid_lo, mid_hi) <= 0) whole(mid_lo, mid_hi);
      edge(hi->integer, FractionPart(FractionAtMost(hi->fraction, true), true));
    }
    return Choose(std::move(alts), "dec-range");
  }

  // ("." [0-9]+)?
  Element AnyFraction() {
    if (!any_fraction_) {
      any_fraction_ = g_->Optional(g_->Group({g_->Byte('.'), g_->Plus(Digit(), "frac-digits")}, "frac"),
                                   "frac");
    }
    return *any_fraction_;
  }

 private:
  std::optional<Element> Choose(std::vector<Sequence> alts, std::string_view name) {
    if (alts.empty()) return std::nullopt;
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    return g_->Choice(std::move(alts), name);
  }

  // Strings of len(a) digits in [a, b], len(a) == len(b) (leading zeros
  // allowed: these are the tails of longer numbers), as alternatives.
  std::vector<Sequence> SameLength(std::string_view a, std::string_view b) {
    size_t i = 0;
    while (i < a.size() && a[i] == b[i]) ++i;
    Sequence prefix = g_->Literal(a.substr(0, i));
    if (i == a.size()) return {prefix};
    const size_t rest = a.size() - i - 1;
    const std::string_view ra = a.substr(i + 1), rb = b.substr(i + 1);
    const bool a_low = AllOf(ra, '0'), b_high = AllOf(rb, '9');
    std::vector<Sequence> alts;
    auto with = [&](Sequence tail) {
      Sequence s = prefix;
      s.insert(s.end(), tail.begin(), tail.end());
      alts.push_back(std::move(s));
    };
    if (!a_low) with({g_->Byte(static_cast<uint8_t>(a[i])), SameLengthRule(ra, std::string(rest, '9'))});
    const char mid_lo = a_low ? a[i] : static_cast<char>(a[i] + 1);
    const char mid_hi = b_high ? b[i] : static_cast<char>(b[i] - 1);
    if (mid_lo <= mid_hi) {
      Sequence mid{Digit(mid_lo, mid_hi)};
      for (size_t k = 0; k < rest; ++k) mid.push_back(Digit());
      with(std::move(mid));
    }
    if (!b_high) with({g_->Byte(static_cast<uint8_t>(b[i])), SameLengthRule(std::string(rest, '0'), rb)});
    return alts;
  }

  Element SameLengthRule(std::string_view a, std::string_view b) {
    return *Choose(SameLength(a, b), "digit-range");
  }

  // Digit strings s (possibly empty, unless `nonempty`) with 0.s >= 0.a,
  // <= 0.b, or both; a and b have no trailing zeros.
  Element FractionAtLeast(std::string_view a, bool nonempty) {
    if (a.empty()) return nonempty ? g_->Plus(Digit(), "frac-digits") : AnyDigits();
    std::vector<Sequence> alts;
    if (a[0] < '9') alts.push_back({Digit(static_cast<char>(a[0] + 1), '9'), AnyDigits()});
    alts.push_back({g_->Byte(static_cast<uint8_t>(a[0])), FractionAtLeast(a.substr(1), false)});
    return *Choose(std::move(alts), "frac-ge");
  }
  Element FractionAtMost(std::string_view b, bool nonempty) {
    if (b.empty()) return nonempty ? g_->Plus(g_->Byte('0'), "frac-zeros") : g_->Star(g_->Byte('0'), "frac-zeros");
    std::vector<Sequence> alts;
    if (!nonempty) alts.push_back({});
    if (b[0] > '0') alts.push_back({Digit('0', static_cast<char>(b[0] - 1)), AnyDigits()});
    alts.push_back({g_->Byte(static_cast<uint8_t>(b[0])), FractionAtMost(b.substr(1), false)});
    return *Choose(std::move(alts), "frac-le");
  }
  Element FractionBetween(std::string_view a, std::string_view b, bool nonempty) {
    if (a.empty()) return FractionAtMost(b, nonempty);
    // a > 0, so s is never empty here; b >= a > 0 so b is not empty either.
    std::vector<Sequence> alts;
    if (a[0] == b[0]) {
      alts.push_back({g_->Byte(static_cast<uint8_t>(a[0])), FractionBetween(a.substr(1), b.substr(1), false)});
    } else {
      alts.push_back({g_->Byte(static_cast<uint8_t>(a[0])), FractionAtLeast(a.substr(1), false)});
      if (a[0] + 1 <= b[0] - 1)
        alts.push_back({Digit(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1)), AnyDigits()});
      alts.push_back({g_->Byte(static_cast<uint8_t>(b[0])), FractionAtMost(b.substr(1), false)});
    }
    return *Choose(std::move(alts), "frac-range");
  }

  // "." digits, or also nothing when `may_be_absent` (0 is in the range).
  Element FractionPart(Element digits, bool may_be_absent) {
    Sequence dotted{g_->Byte('.'), digits};
    if (!may_be_absent) return g_->Group(std::move(dotted), "frac");
    return g_->Choice({std::move(dotted), {}}, "frac");
  }

  Grammar* g_;
  std::optional<Element> any_fraction_;
};

// The magnitudes of a signed range's two halves: values >= 0 in
// [max(lo, 0), hi] and values <= 0 as magnitudes in [max(-hi, 0), -lo].
struct Halves {
  std::optional<std::pair<Decimal, std::optional<Decimal>>> nonnegative, negative;
};

Halves Split(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi) {
  Halves h;
  const Decimal zero;
  auto magnitude = [](Decimal d) {
    d.negative = false;
    return d;
  };
  if (!hi || !hi->negative) {
    const Decimal from = lo && !lo->negative ? *lo : zero;
    h.nonnegative.emplace(from, hi);
  }
  if (!lo || lo->negative) {
    const Decimal from = hi && hi->negative ? magnitude(*hi) : zero;
    std::optional<Decimal> to;
    if (lo) to = magnitude(*lo);
    h.negative.emplace(from, to);
  }
  return h;
}

template <typename Half>
std::optional<Element> Signed(Grammar* g, const Halves& h, Half half, std::string_view name) {
  std::vector<Sequence> alts;
  if (h.nonnegative)
    if (std::optional<Element> e = half(h.nonnegative->first, h.nonnegative->second)) alts.push_back({*e});
  if (h.negative)
    if (std::optional<Element> e = half(h.negative->first, h.negative->second))
      alts.push_back({g->Byte('-'), *e});
  if (alts.empty()) return std::nullopt;
  return g->Choice(std::move(alts), name);
}

}  // namespace

Decimal DecimalOf(double value) {
  char buf[1200];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed);
  std::string_view text(buf, ec == std::errc() ? static_cast<size_t>(end - buf) : 0);
  Decimal d;
  if (!text.empty() && text[0] == '-') {
    d.negative = true;
    text.remove_prefix(1);
  }
  const size_t dot = text.find('.');
  d.integer = std::string(text.substr(0, dot));
  if (dot != std::string_view::npos) d.fraction = std::string(text.substr(dot + 1));
  return Normalized(std::move(d));
}

Decimal RoundDecimal(Decimal d, int digits, bool up) {
  if (d.fraction.size() <= static_cast<size_t>(digits)) return d;
  d.fraction.resize(static_cast<size_t>(digits));
  // Truncation moves toward zero: toward +inf for negatives, -inf for
  // positives; the other direction adds one unit in the last place.
  if (up != d.negative) {
    std::string all = IncrementDigits(d.integer + d.fraction);
    const size_t split = all.size() - static_cast<size_t>(digits);
    d.integer = all.substr(0, split);
    d.fraction = all.substr(split);
  }
  return Normalized(std::move(d));
}

int CompareDecimal(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = CompareDigits(a.integer, b.integer);
  if (c == 0) {
    const size_t n = std::max(a.fraction.size(), b.fraction.size());
    const std::string fa = a.fraction + std::string(n - a.fraction.size(), '0');
    const std::string fb = b.fraction + std::string(n - b.fraction.size(), '0');
    c = fa.compare(fb) < 0 ? -1 : (fa == fb ? 0 : 1);
  }
  return a.negative ? -c : c;
}

Decimal DecimalOfInteger(long long value) {
  Decimal d;
  d.negative = value < 0;
  // Through unsigned: -LLONG_MIN overflows.
  const unsigned long long magnitude =
      value < 0 ? 0ULL - static_cast<unsigned long long>(value) : static_cast<unsigned long long>(value);
  d.integer = std::to_string(magnitude);
  return Normalized(std::move(d));
}

Decimal DecimalOfInteger(unsigned long long value) {
  Decimal d;
  d.integer = std::to_string(value);
  return d;
}

Decimal AdjacentInteger(Decimal d, bool up) {
  if (d.integer == "0") {
    d.integer = "1";
    d.negative = !up;
    return d;
  }
  if (d.negative != up) {
    d.integer = IncrementDigits(d.integer);
  } else {
    d.integer = DecrementDigits(d.integer);
  }
  return Normalized(std::move(d));
}

Element AnyJsonInteger(Grammar* g) {
  const Element digit = g->Bytes(ByteSet::Range('0', '9'));
  const Element natural = g->Choice(
      {{g->Byte('0')}, {g->Bytes(ByteSet::Range('1', '9')), g->Star(digit, "int-digits")}}, "natural");
  return g->Group({g->Optional(g->Byte('-'), "minus"), natural}, "integer");
}

Element AnyJsonNumber(Grammar* g) {
  const Element integer = AnyJsonInteger(g);
  const Element digits = g->Plus(g->Bytes(ByteSet::Range('0', '9')), "exp-digits");
  ByteSet e = ByteSet::Of('e');
  e.Add('E');
  ByteSet sign = ByteSet::Of('+');
  sign.Add('-');
  const Element exponent =
      g->Optional(g->Group({g->Bytes(e), g->Optional(g->Bytes(sign), "exp-sign"), digits}, "exp"), "exp");
  return g->Group({integer, RangeBuilder(g).AnyFraction(), exponent}, "number");
}

std::optional<Element> IntegerInRange(Grammar* g, const std::optional<Decimal>& lo,
                                      const std::optional<Decimal>& hi) {
  if (lo && hi && CompareDecimal(*lo, *hi) > 0) return std::nullopt;
  RangeBuilder b(g);
  return Signed(g, Split(lo, hi), [&](const Decimal& from, const std::optional<Decimal>& to) {
    std::optional<std::string> top;
    if (to) top = to->integer;
    return b.Integers(from.integer, top);
  }, "int-in-range");
}

std::optional<Element> NumberInRange(Grammar* g, const std::optional<Decimal>& lo,
                                     const std::optional<Decimal>& hi) {
  if (lo && hi && CompareDecimal(*lo, *hi) > 0) return std::nullopt;
  RangeBuilder b(g);
  return Signed(g, Split(lo, hi), [&](const Decimal& from, const std::optional<Decimal>& to) {
    return b.Decimals(from, to);
  }, "num-in-range");
}

}  // namespace floe::grammar
