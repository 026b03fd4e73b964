#include "common/jinja/operators.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/jinja/pyformat.h"
#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace {

constexpr size_t kMaxRepeat = 64 << 20;  // bytes a `str * n` may produce

[[noreturn]] void Overflow() { Fail("integer overflow: Python's ints grow past the 64 bits this engine holds"); }

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  Fail("unsupported operand type(s) for " + op + ": '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

Value Repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    if (n > 0 && seq.s.size() * static_cast<size_t>(n) > kMaxRepeat) Fail("string repetition too large");
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    Value v = Value::String(std::move(out));
    v.markup = seq.markup;
    return v;
  }
  if (n > 0 && seq.list->size() * static_cast<size_t>(n) > kMaxRepeat) Fail("list repetition too large");
  List items;
  for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.list->begin(), seq.list->end());
  return Value::MakeList(std::move(items), seq.seq);
}

bool Repeatable(const Value& v) {
  return v.is_string() || v.is_list(Value::Seq::kList) || v.is_list(Value::Seq::kTuple);
}

// CPython's float_floor_div / float_rem.
void FloatDivMod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *mod = m;
}

Value Power(const Value& a, const Value& b) {
  const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
  if (ints && b.as_int() >= 0) {
    int64_t result = 1, base = a.as_int();
    for (int64_t e = b.as_int(); e > 0; e >>= 1) {
      if (e & 1 && __builtin_mul_overflow(result, base, &result)) Overflow();
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) Overflow();
    }
    return Value::Int(result);
  }
  const double x = a.as_double(), y = b.as_double();
  if (x == 0 && y < 0) Fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y)) Fail("unsupported: a negative number to a fractional power is complex in Python");
  const double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) Fail("OverflowError: (34, 'Numerical result out of range')");
  return Value::Float(r);
}

}  // namespace

Value BinaryOp(const std::string& op, const Value& a, const Value& b) {
  RequireDefined(a);
  if (op == "%" && a.is_string()) {  // str % Undefined formats it as ""
    Value v = Value::String(PercentFormat(a.s, b, a.markup));
    v.markup = a.markup;
    return v;
  }
  RequireDefined(b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (!a.markup && !b.markup) return Value::String(a.s + b.s);
      // Markup escapes the plain side, whichever side it is on.
      Value v = Value::String((a.markup ? a.s : HtmlEscape(a.s)) + (b.markup ? b.s : HtmlEscape(b.s)));
      v.markup = true;
      return v;
    }
    if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList && a.seq == b.seq &&
        (a.seq == Value::Seq::kList || a.seq == Value::Seq::kTuple)) {
      List items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::MakeList(std::move(items), a.seq);
    }
  }
  if (op == "*") {
    if (Repeatable(a) && b.is_int()) return Repeat(a, b.as_int());
    if (a.is_int() && Repeatable(b)) return Repeat(b, a.as_int());
  }
  if (!a.is_number() || !b.is_number()) Unsupported(op, a, b);
  const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
  const int64_t x = a.as_int(), y = b.as_int();
  const double fx = a.as_double(), fy = b.as_double();
  int64_t r;
  if (op == "+") {
    if (!ints) return Value::Float(fx + fy);
    if (__builtin_add_overflow(x, y, &r)) Overflow();
    return Value::Int(r);
  }
  if (op == "-") {
    if (!ints) return Value::Float(fx - fy);
    if (__builtin_sub_overflow(x, y, &r)) Overflow();
    return Value::Int(r);
  }
  if (op == "*") {
    if (!ints) return Value::Float(fx * fy);
    if (__builtin_mul_overflow(x, y, &r)) Overflow();
    return Value::Int(r);
  }
  if (op == "/") {
    if (fy == 0) Fail(ints ? "ZeroDivisionError: division by zero" : "ZeroDivisionError: float division by zero");
    return Value::Float(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0) Fail("ZeroDivisionError: integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) Overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::Int(op == "//" ? q : m);
    }
    if (fy == 0) Fail(op == "//" ? "ZeroDivisionError: float floor division by zero" : "ZeroDivisionError: float modulo");
    double q, m;
    FloatDivMod(fx, fy, &q, &m);
    return Value::Float(op == "//" ? q : m);
  }
  if (op == "**") return Power(a, b);
  Fail("unknown operator " + op);
}

Value Negate(const Value& v) {
  RequireDefined(v);
  if (v.kind == Value::Kind::kFloat) return Value::Float(-v.f);
  if (v.is_int()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) Overflow();
    return Value::Int(-v.as_int());
  }
  Fail("bad operand type for unary -: '" + TypeName(v) + "'");
}

Value UnaryPlus(const Value& v) {
  RequireDefined(v);
  if (v.kind == Value::Kind::kFloat) return v;
  if (v.is_int()) return Value::Int(v.as_int());
  Fail("bad operand type for unary +: '" + TypeName(v) + "'");
}

double PyRound(double x, int64_t ndigits) {
  if (!std::isfinite(x) || x == 0) return x;
  if (ndigits > 323) return x;
  if (ndigits < -308) return 0.0 * x;
  // The exact decimal expansion of x (glibc prints it exactly), rounded by
  // hand at the wanted digit, ties to even; then read back, as CPython does.
  static constexpr int kFraction = 1080;  // > 1074, the most a double needs
  std::string exact(kFraction + 400, '\0');
  const int n = std::snprintf(exact.data(), exact.size(), "%.*f", kFraction, std::fabs(x));
  exact.resize(static_cast<size_t>(n));
  const size_t point = exact.find('.');
  std::string digits = exact.substr(0, point) + exact.substr(point + 1);
  const int64_t int_digits = static_cast<int64_t>(point);
  const int64_t keep = int_digits + ndigits;  // digits kept from the left
  if (keep < 0) return std::copysign(0.0, x);
  std::string kept = digits.substr(0, static_cast<size_t>(keep));
  const std::string rest = digits.substr(static_cast<size_t>(keep));
  bool up = false;
  if (!rest.empty() && rest[0] > '5') up = true;
  else if (!rest.empty() && rest[0] == '5') {
    const bool more = rest.find_first_not_of('0', 1) != std::string::npos;
    const bool odd = !kept.empty() && ((kept.back() - '0') % 2 == 1);
    up = more || odd;
  }
  if (kept.empty()) kept = "0";
  if (up) {
    int i = static_cast<int>(kept.size()) - 1;
    while (i >= 0 && kept[static_cast<size_t>(i)] == '9') kept[static_cast<size_t>(i--)] = '0';
    if (i < 0) kept.insert(kept.begin(), '1');
    else ++kept[static_cast<size_t>(i)];
  }
  const std::string text = kept + "e" + std::to_string(-ndigits);
  return std::copysign(std::strtod(text.c_str(), nullptr), x);
}

namespace {

// The digits of a Python numeric literal: single "_" only between digits.
template <typename IsDigit>
bool CleanDigits(std::string_view s, IsDigit digit, std::string* out) {
  if (s.empty() || !digit(s.front()) || !digit(s.back())) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (!digit(s[i + 1]) || !digit(s[i - 1])) return false;
      continue;
    }
    if (!digit(s[i])) return false;
    *out += s[i];
  }
  return true;
}

bool Dec(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::optional<int64_t> PyParseInt(std::string_view s, int base) {
  s = PyStripSpace(s, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() > 1 && s[0] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[1])));
    const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == 0 || base == prefixed)) {
      base = prefixed;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) {
    base = 10;
    if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string_view::npos) return std::nullopt;
  }
  if (base < 2 || base > 36) return std::nullopt;
  auto digit = [base](char c) {
    const int v = Dec(c) ? c - '0' : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10 : 99;
    return v < base;
  };
  std::string digits;
  if (!CleanDigits(s, digit, &digits)) return std::nullopt;
  errno = 0;
  const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
  const unsigned long long limit = static_cast<unsigned long long>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
  if (errno == ERANGE || v > limit) Fail("integer " + std::string(s) + " is beyond the 64 bits this engine holds");
  return negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
}

std::optional<double> PyParseFloat(std::string_view s) {
  s = PyStripSpace(s, true, true);
  std::string text;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    text += s[0];
    s.remove_prefix(1);
  }
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "infinity" || lower == "nan") return std::strtod((text + lower).c_str(), nullptr);
  // digits [. digits] [e [sign] digits], a digit somewhere before the exponent
  const size_t e = lower.find('e');
  const std::string_view mantissa = std::string_view(lower).substr(0, e);
  const size_t dot = mantissa.find('.');
  std::string whole, fraction, exponent;
  const std::string_view w = mantissa.substr(0, dot);
  const std::string_view f = dot == std::string_view::npos ? std::string_view() : mantissa.substr(dot + 1);
  if (!w.empty() && !CleanDigits(w, Dec, &whole)) return std::nullopt;
  if (!f.empty() && !CleanDigits(f, Dec, &fraction)) return std::nullopt;
  if (whole.empty() && fraction.empty()) return std::nullopt;
  text += (whole.empty() ? "0" : whole) + "." + (fraction.empty() ? "0" : fraction);
  if (e != std::string::npos) {
    std::string_view x = std::string_view(lower).substr(e + 1);
    std::string sign;
    if (!x.empty() && (x[0] == '+' || x[0] == '-')) {
      sign = x[0];
      x.remove_prefix(1);
    }
    if (!CleanDigits(x, Dec, &exponent)) return std::nullopt;
    text += "e" + sign + exponent;
  }
  return std::strtod(text.c_str(), nullptr);
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace floe::jinja
