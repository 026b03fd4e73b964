#include "common/jinja/pyformat.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "common/jinja/builtins.h"
#include "common/jinja/operators.h"
#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace {

std::string Pad(const std::string& body, size_t width, char32_t fill, char align, size_t sign_len = 0) {
  const size_t len = CodePointCount(body);
  if (len >= width) return body;
  const size_t n = width - len;
  std::string f;
  AppendUtf8(fill, &f);
  auto fills = [&](size_t k) {
    std::string out;
    for (size_t i = 0; i < k; ++i) out += f;
    return out;
  };
  switch (align) {
    case '<': return body + fills(n);
    case '^': return fills(n / 2) + body + fills(n - n / 2);
    case '=': return body.substr(0, sign_len) + fills(n) + body.substr(sign_len);
    default: return fills(n) + body;
  }
}

std::string Digits(uint64_t v, int base, bool upper) {
  if (v == 0) return "0";
  std::string out;
  const char* set = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  for (; v; v /= static_cast<uint64_t>(base)) out.insert(out.begin(), set[v % static_cast<uint64_t>(base)]);
  return out;
}

uint64_t Magnitude(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

std::string Group(const std::string& digits, char sep, size_t every) {
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out;
}

std::string CFloat(double x, char type, int precision, bool alt) {
  char fmt[16];
  std::snprintf(fmt, sizeof fmt, "%%%s.%d%c", alt ? "#" : "", precision, type);
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, std::fabs(x));
  return buf;
}

// ---- printf-style -------------------------------------------------------

std::string PercentOne(char conv, const Value& v, const std::string& flags, int width, int precision,
                       bool escape) {
  const bool left = flags.find('-') != std::string::npos;
  const bool zero = flags.find('0') != std::string::npos && !left;
  const bool alt = flags.find('#') != std::string::npos;
  const std::string plus = flags.find('+') != std::string::npos ? "+" : flags.find(' ') != std::string::npos ? " " : "";
  std::string body;
  size_t sign_len = 0;
  switch (conv) {
    case 's': case 'r': case 'a':
      body = conv == 's' ? Str(v) : conv == 'r' ? Repr(v) : AsciiRepr(v);
      if (escape && !(conv == 's' && v.is_string() && v.markup)) body = HtmlEscape(body);
      if (precision >= 0) body = Encode(Decode(body).substr(0, static_cast<size_t>(precision)));
      return Pad(body, width < 0 ? 0 : static_cast<size_t>(width), ' ', left ? '<' : '>');
    case 'c': {
      if (v.is_string() && CodePointCount(v.s) == 1) body = v.s;
      else if (v.is_int() && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) AppendUtf8(static_cast<char32_t>(v.as_int()), &body);
      else Fail("%c requires int or char");
      return Pad(body, width < 0 ? 0 : static_cast<size_t>(width), ' ', left ? '<' : '>');
    }
    case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
      RequireDefined(v);
      const bool decimal = conv == 'd' || conv == 'i' || conv == 'u';
      int64_t n;
      if (v.is_int()) n = v.as_int();
      else if (decimal && v.kind == Value::Kind::kFloat && std::isfinite(v.f) && std::fabs(v.f) < 9.2e18) n = static_cast<int64_t>(v.f);
      else Fail(std::string("%") + conv + " format: " + (decimal ? "a real number" : "an integer") + " is required, not " + TypeName(v));
      std::string digits = Digits(Magnitude(n), decimal ? 10 : conv == 'o' ? 8 : 16, conv == 'X');
      if (precision > 0 && digits.size() < static_cast<size_t>(precision)) digits.insert(0, static_cast<size_t>(precision) - digits.size(), '0');
      const std::string prefix = alt && conv == 'o' ? "0o" : alt && conv == 'x' ? "0x" : alt && conv == 'X' ? "0X" : "";
      const std::string sign = n < 0 ? "-" : plus;
      body = sign + prefix + digits;
      sign_len = sign.size() + prefix.size();
      break;
    }
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
      RequireDefined(v);
      if (!v.is_number()) Fail("must be real number, not " + TypeName(v));
      const double x = v.as_double();
      const std::string sign = std::signbit(x) && !std::isnan(x) ? "-" : plus;
      body = sign + CFloat(x, conv, precision < 0 ? 6 : precision, alt);
      sign_len = sign.size();
      if (!std::isfinite(x)) return Pad(body, width < 0 ? 0 : static_cast<size_t>(width), ' ', left ? '<' : '>');
      break;
    }
    default:
      Fail(std::string("unsupported format character '") + conv + "'");
  }
  const size_t w = width < 0 ? 0 : static_cast<size_t>(width);
  if (left) return Pad(body, w, ' ', '<');
  if (zero) return Pad(body, w, '0', '=', sign_len);
  return Pad(body, w, ' ', '>');
}

// ---- format mini-language ------------------------------------------------

struct Spec {
  char32_t fill = ' ';
  char align = '\0';
  char sign = '\0';
  bool alt = false;
  size_t width = 0;
  char grouping = '\0';
  int precision = -1;
  char type = '\0';
};

Spec ParseSpec(std::string_view text, bool numeric_default) {
  std::u32string s = Decode(text);
  Spec spec;
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  bool fill_given = false;
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = static_cast<char>(s[1]);
    fill_given = true;
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = static_cast<char>(s[0]);
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == 'z') Fail("unsupported: the 'z' format option");
  if (i < s.size() && s[i] == '#') spec.alt = true, ++i;
  if (i < s.size() && s[i] == '0') {
    if (!fill_given) spec.fill = '0';
    if (!spec.align && numeric_default) spec.align = '=';
    ++i;
  }
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') spec.width = spec.width * 10 + (s[i++] - '0');
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || s[i] < '0' || s[i] > '9') Fail("ValueError: Format specifier missing precision");
    spec.precision = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') spec.precision = spec.precision * 10 + static_cast<int>(s[i++] - '0');
  }
  if (i < s.size()) spec.type = static_cast<char>(s[i++]);
  if (i < s.size()) Fail("ValueError: Invalid format specifier");
  if (spec.type == 'n') Fail("unsupported: the 'n' format type");
  if (spec.grouping && spec.fill == '0' && spec.align == '=') Fail("unsupported: zero padding with a thousands separator");
  return spec;
}

std::string Finish(const std::string& sign, const std::string& body, const Spec& spec) {
  return Pad(sign + body, spec.width, spec.fill, spec.align ? spec.align : '>', sign.size());
}

std::string FormatFloat(double x, Spec spec) {
  std::string sign = std::signbit(x) && !std::isnan(x) ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  std::string body;
  if (spec.type == '\0') {
    if (spec.precision >= 0) Fail("unsupported: a float precision without a format type");
    body = FloatRepr(std::fabs(x));
  } else if (spec.type == '%') {
    body = CFloat(x * 100, 'f', spec.precision < 0 ? 6 : spec.precision, spec.alt) + "%";
  } else if (std::string_view("eEfFgG").find(spec.type) != std::string_view::npos) {
    body = CFloat(x, spec.type, spec.precision < 0 ? 6 : spec.precision, spec.alt);
  } else {
    Fail(std::string("ValueError: Unknown format code '") + spec.type + "' for object of type 'float'");
  }
  if (spec.grouping && std::isfinite(x)) {
    const size_t end = body.find_first_not_of("0123456789");
    body = Group(body.substr(0, end), spec.grouping, 3) + (end == std::string::npos ? "" : body.substr(end));
  }
  return Finish(sign, body, spec);
}

}  // namespace

std::string AsciiRepr(const Value& v) {
  std::string out;
  for (char32_t c : Decode(Repr(v))) {
    if (c < 0x80) {
      out += static_cast<char>(c);
      continue;
    }
    char hex[16];
    if (c < 0x100) std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
    else if (c < 0x10000) std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
    else std::snprintf(hex, sizeof hex, "\\U%08x", static_cast<unsigned>(c));
    out += hex;
  }
  return out;
}

std::string PercentFormat(const std::string& format, const Value& args, bool escape) {
  const List single = {args};
  const bool tuple = args.is_list(Value::Seq::kTuple);
  const List& positional = tuple ? *args.list : single;
  // CPython takes any non-tuple, non-str argument with __getitem__ (a dict,
  // a list, a range, jinja2's Undefined) as a possible mapping, and then does
  // not insist that every argument is used.
  const bool mapping = !tuple && (args.is_dict() || args.is_undefined() ||
                                  args.is_list(Value::Seq::kList) || args.is_list(Value::Seq::kRange));
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) Fail("ValueError: incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) Fail("ValueError: incomplete format key");
      if (!mapping) Fail("TypeError: format requires a mapping");
      RequireDefined(args);
      const std::string key = format.substr(i + 1, close - i - 1);
      if (!args.is_dict()) Fail("TypeError: " + TypeName(args) + " indices must be integers or slices, not str");
      value = args.Find(key);
      if (!value) Fail("KeyError: '" + key + "'");
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos) flags += format[i++];
    int width = -1, precision = -1;
    if (i < format.size() && format[i] == '*') Fail("unsupported: '*' widths in % formatting");
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) width = (width < 0 ? 0 : width) * 10 + (format[i++] - '0');
    if (i < format.size() && format[i] == '.') {
      precision = 0;
      ++i;
      if (i < format.size() && format[i] == '*') Fail("unsupported: '*' precisions in % formatting");
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) precision = precision * 10 + (format[i++] - '0');
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) Fail("ValueError: incomplete format");
    const char conv = format[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!value) {
      if (next >= positional.size()) Fail("TypeError: not enough arguments for format string");
      value = &positional[next++];
    }
    out += PercentOne(conv, *value, flags, width, precision, escape);
  }
  if (next < positional.size() && !mapping) Fail("TypeError: not all arguments converted during string formatting");
  return out;
}

std::string FormatSpec(const Value& v, std::string_view text) {
  if (text.empty()) return Str(v);
  RequireDefined(v);
  if (v.is_string()) {
    const Spec spec = ParseSpec(text, false);
    if (spec.type && spec.type != 's') Fail(std::string("ValueError: Unknown format code '") + spec.type + "' for object of type 'str'");
    if (spec.sign || spec.alt || spec.grouping || spec.align == '=') Fail("ValueError: invalid format specifier for a string");
    std::string body = v.s;
    if (spec.precision >= 0) body = Encode(Decode(body).substr(0, static_cast<size_t>(spec.precision)));
    return Pad(body, spec.width, spec.fill, spec.align ? spec.align : '<');
  }
  if (v.kind == Value::Kind::kFloat) return FormatFloat(v.f, ParseSpec(text, true));
  if (v.is_int()) {
    Spec spec = ParseSpec(text, true);
    if (std::string_view("eEfFgG%").find(spec.type) != std::string_view::npos && spec.type)
      return FormatFloat(static_cast<double>(v.as_int()), spec);
    if (spec.precision >= 0) Fail("ValueError: Precision not allowed in integer format specifier");
    const int64_t n = v.as_int();
    const std::string sign = n < 0 ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
    if (spec.type == 'c') {
      std::string body;
      AppendUtf8(static_cast<char32_t>(n), &body);
      return Finish("", body, spec);
    }
    int base = 10;
    std::string prefix;
    switch (spec.type) {
      case '\0': case 'd': break;
      case 'b': base = 2, prefix = "0b"; break;
      case 'o': base = 8, prefix = "0o"; break;
      case 'x': base = 16, prefix = "0x"; break;
      case 'X': base = 16, prefix = "0X"; break;
      default: Fail(std::string("ValueError: Unknown format code '") + spec.type + "' for object of type 'int'");
    }
    std::string digits = Digits(Magnitude(n), base, spec.type == 'X');
    if (spec.grouping) digits = Group(digits, spec.grouping, base == 10 ? 3 : 4);
    return Finish(sign + (spec.alt ? prefix : ""), digits, spec);
  }
  Fail("TypeError: unsupported format string passed to " + TypeName(v) + ".__format__");
}

std::string StrFormat(const std::string& format, const List& positional,
                      const std::vector<std::pair<std::string, Value>>& keyword, bool escape) {
  std::string out;
  size_t auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      Fail("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // {field[!conversion][:spec]}, without nested fields.
    size_t close = i + 1, depth = 0;
    for (; close < format.size(); ++close) {
      if (format[close] == '[') ++depth;
      else if (format[close] == ']' && depth) --depth;
      else if (format[close] == '{' && !depth) Fail("unsupported: nested fields in str.format()");
      else if (format[close] == '}' && !depth) break;
    }
    if (close >= format.size()) Fail("ValueError: expected '}' before end of string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    char conversion = '\0';
    size_t colon = std::string::npos, bang = std::string::npos;
    depth = 0;
    for (size_t k = 0; k < field.size(); ++k) {
      if (field[k] == '[') ++depth;
      else if (field[k] == ']' && depth) --depth;
      else if (!depth && field[k] == '!' && bang == std::string::npos && colon == std::string::npos) bang = k;
      else if (!depth && field[k] == ':') {
        colon = k;
        break;
      }
    }
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (bang != std::string::npos) {
      if (bang + 2 != field.size()) Fail("ValueError: expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    // The argument: "", a number or a name, then .attr and [key] parts.
    size_t k = 0;
    while (k < field.size() && field[k] != '.' && field[k] != '[') ++k;
    const std::string head = field.substr(0, k);
    Value value;
    if (head.empty() || std::isdigit(static_cast<unsigned char>(head[0]))) {
      size_t index;
      if (head.empty()) {
        if (manual) Fail("ValueError: cannot switch from manual field specification to automatic field numbering");
        automatic = true;
        index = auto_index++;
      } else {
        if (automatic) Fail("ValueError: cannot switch from automatic field numbering to manual field specification");
        manual = true;
        index = std::stoul(head);
      }
      if (index >= positional.size()) Fail("IndexError: Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      value = positional[index];
    } else {
      const Value* found = nullptr;
      for (const auto& [name, v] : keyword)
        if (name == head) found = &v;
      if (!found) Fail("KeyError: '" + head + "'");
      value = *found;
    }
    while (k < field.size()) {
      if (field[k] == '.') {
        size_t end = k + 1;
        while (end < field.size() && field[end] != '.' && field[end] != '[') ++end;
        value = GetAttr(value, field.substr(k + 1, end - k - 1));
        k = end;
      } else {
        const size_t end = field.find(']', k);
        if (end == std::string::npos) Fail("ValueError: Missing ']' in format string");
        const std::string key = field.substr(k + 1, end - k - 1);
        const bool number = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        value = GetItem(value, number ? Value::Int(std::stoll(key)) : Value::String(key));
        k = end + 1;
      }
    }
    if (conversion == 'r') value = Value::String(Repr(value));
    else if (conversion == 's') value = Value::String(Str(value));
    else if (conversion == 'a') value = Value::String(AsciiRepr(value));
    else if (conversion) Fail(std::string("ValueError: Unknown conversion specifier ") + conversion);
    if (escape && value.is_string() && value.markup) {
      if (!spec.empty()) Fail("ValueError: Unsupported format specification for Markup.");
      out += value.s;
    } else {
      out += escape ? HtmlEscape(FormatSpec(value, spec)) : FormatSpec(value, spec);
    }
  }
  return out;
}

}  // namespace floe::jinja
