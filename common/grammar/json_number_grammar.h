// Internal to the JSON Schema front end: grammars of JSON numbers, and of
// the numbers inside a range, exact on decimal digit strings (no floating
// point in the grammar itself).
//
// A range is built from digit-range pieces: [17, 342] is 1[7-9] | [2-9]\d |
// [1-2]\d\d | 3[0-3]\d | 34[0-2], nested into one rule per digit position so
// a bound of n digits costs O(n) rules. Fractions compare digit by digit
// (0.25 <= 0.3 because 2 < 3), so a decimal range is an integer range plus
// fraction ranges at its two ends. Bounded numbers have no exponent.
//
// Not thread-safe (writes the grammar); pure otherwise.
#pragma once

#include <optional>
#include <string>

#include "common/grammar/grammar.h"

namespace floe::grammar {

// A finite decimal: canonical digits (no leading zeros in `integer`, "0" for
// values below one; no trailing zeros in `fraction`); zero is never negative.
struct Decimal {
  bool negative = false;
  std::string integer = "0";
  std::string fraction;
};

// The decimal that `value` (finite) prints as: the shortest digits that read
// back as the same double, without exponent.
Decimal DecimalOf(double value);
// `d` rounded to at most `digits` fraction digits, toward +infinity (`up`)
// or -infinity. digits = 0 is ceil/floor.
Decimal RoundDecimal(Decimal d, int digits, bool up);
// -1, 0, 1 as a < b, a == b, a > b.
int CompareDecimal(const Decimal& a, const Decimal& b);
// The decimal of an exact integer.
Decimal DecimalOfInteger(long long value);
Decimal DecimalOfInteger(unsigned long long value);
// d + 1 (`up`) or d - 1 for an integral d.
Decimal AdjacentInteger(Decimal d, bool up);

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
Element AnyJsonNumber(Grammar* g);
// -?(0|[1-9][0-9]*)
Element AnyJsonInteger(Grammar* g);
// Integers (integral lo/hi; nullopt: unbounded) in [lo, hi], written
// without fraction or exponent; nullopt when the range is empty.
std::optional<Element> IntegerInRange(Grammar* g, const std::optional<Decimal>& lo,
                                      const std::optional<Decimal>& hi);
// Numbers in [lo, hi] (at least one bound given), without exponent;
// nullopt when the range is empty.
std::optional<Element> NumberInRange(Grammar* g, const std::optional<Decimal>& lo,
                                     const std::optional<Decimal>& hi);

}  // namespace floe::grammar
