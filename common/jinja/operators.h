// Python's arithmetic on template values (+ - * / // % ** and unary signs),
// with its int/float rules (7 / 2 == 3.5, -7 // 2 == -4, str * int), plus
// the number parsing and rounding that int(), float() and round() do.
// Ints are 64-bit: a result Python would grow into a bigger int is an error,
// never a wrapped value. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/jinja/value.h"

namespace floe::jinja {

// op is one of + - * / // % **; throws TypeError/ZeroDivisionError's Error.
Value BinaryOp(const std::string& op, const Value& a, const Value& b);
Value Negate(const Value& v);
Value UnaryPlus(const Value& v);

// round(x, ndigits) for a float: correctly rounded, ties to even, as CPython.
double PyRound(double x, int64_t ndigits);
// int(s, base) and float(s) for strings; nullopt where Python raises
// ValueError. Whitespace around and "_" between digits are accepted.
std::optional<int64_t> PyParseInt(std::string_view s, int base);
std::optional<double> PyParseFloat(std::string_view s);
// markupsafe.escape: & < > " ' as HTML entities.
std::string HtmlEscape(std::string_view s);

}  // namespace floe::jinja
