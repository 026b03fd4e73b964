// jinja2's filters over strings and numbers, transformers' tojson, and the
// table of every filter the subset implements.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "common/jinja/filters_internal.h"
#include "common/jinja/json.h"
#include "common/jinja/operators.h"
#include "common/jinja/pyformat.h"
#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace filters {
namespace {

Value Text(std::string s, bool markup = false) {
  Value v = Value::String(std::move(s));
  v.markup = markup;
  return v;
}

// soft_str: a string stays itself (Markup included), anything else is str()'d.
Value SoftStr(const Value& v) { return v.is_string() ? v : Value::String(Str(v)); }

Value Abs(const Value& v, const Args& a) {
  Bound(a, "abs", {});
  if (v.kind == Value::Kind::kFloat) return Value::Float(std::fabs(v.f));
  if (v.is_int()) return v.as_int() < 0 ? Negate(v) : Value::Int(v.as_int());
  Fail("TypeError: bad operand type for abs(): '" + TypeName(v) + "'");
}

Value Capitalize(const Value& v, const Args& a) {
  Bound(a, "capitalize", {});
  const Value s = SoftStr(v);
  return Text(PyCapitalize(s.s), s.markup);
}

Value Upper(const Value& v, const Args& a) {
  Bound(a, "upper", {});
  const Value s = SoftStr(v);
  return Text(PyUpper(s.s), s.markup);
}

Value Lower(const Value& v, const Args& a) {
  Bound(a, "lower", {});
  const Value s = SoftStr(v);
  return Text(PyLower(s.s), s.markup);
}

// jinja2's title: split before runs of [-\s({\[<], each piece's first
// character upper-cased and the rest lower-cased (not str.title()).
Value Title(const Value& v, const Args& a) {
  Bound(a, "title", {});
  const std::u32string s = Decode(Str(v));
  auto separator = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c); };
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    const bool sep = separator(s[i]);
    while (j < s.size() && separator(s[j]) == sep) ++j;
    if (sep) {
      out += Encode(s.substr(i, j - i));
    } else {
      out += PyUpper(Encode(s.substr(i, 1))) + PyLower(Encode(s.substr(i + 1, j - i - 1)));
    }
    i = j;
  }
  return Value::String(out);
}

Value Center(const Value& v, const Args& a) {
  Bound b(a, "center", {"width"});
  Args method;
  method.positional = {b.get(0, Value::Int(80))};
  return CallMethod(Value::Method(SoftStr(v), "center"), method);
}

Value Length(const Value& v, const Args& a) {
  Bound(a, "length", {});
  return Value::Int(jinja::Length(v));
}

Value Default(const Value& v, const Args& a) {
  Bound b(a, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (Truthy(b.get(1, Value::Bool(false))) && !Truthy(v)))
    return b.get(0, Value::String(""));
  return v;
}

Value Float(const Value& v, const Args& a) {
  Bound b(a, "float", {"default"});
  RequireDefined(v);  // float(Undefined) raises UndefinedError, not TypeError
  if (v.kind == Value::Kind::kFloat) return v;
  if (v.is_int()) return Value::Float(static_cast<double>(v.as_int()));
  if (v.is_string())
    if (const auto x = PyParseFloat(v.s)) return Value::Float(*x);
  return b.get(0, Value::Float(0.0));
}

Value Int(const Value& v, const Args& a) {
  Bound b(a, "int", {"default", "base"});
  RequireDefined(v);
  const Value fallback = b.get(0, Value::Int(0));
  auto from_double = [&](double x) {
    if (std::isnan(x)) return fallback;  // ValueError: caught
    if (std::isinf(x)) Fail("OverflowError: cannot convert float infinity to integer");
    if (std::fabs(x) >= 9.2e18) Fail("integer beyond the 64 bits this engine holds");
    return Value::Int(static_cast<int64_t>(std::trunc(x)));
  };
  if (v.is_int()) return Value::Int(v.as_int());
  if (v.kind == Value::Kind::kFloat) return from_double(v.f);
  if (v.is_string()) {
    const Value base = b.get(1, Value::Int(10));
    if (!base.is_int()) Fail("TypeError: 'str' object cannot be interpreted as an integer");
    if (const auto x = PyParseInt(v.s, static_cast<int>(base.as_int()))) return Value::Int(*x);
    if (const auto x = PyParseFloat(v.s)) return from_double(*x);
  }
  return fallback;
}

Value Format(const Value& v, const Args& a) {
  if (!a.positional.empty() && !a.keyword.empty())
    Fail("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  const Value s = SoftStr(v);
  const Value args = a.keyword.empty() ? Value::Tuple(a.positional)
                                       : Value::MakeDict(Dict(a.keyword.begin(), a.keyword.end()));
  return Text(PercentFormat(s.s, args, s.markup), s.markup);
}

Value Indent(const Value& v, const Args& a) {
  Bound b(a, "indent", {"width", "first", "blank"});
  const Value width = b.get(0, Value::Int(4));
  std::string indention;
  if (width.is_string()) indention = width.s;
  else if (width.is_int()) indention = std::string(static_cast<size_t>(std::max<int64_t>(width.as_int(), 0)), ' ');
  else Fail("TypeError: can't multiply sequence by non-int of type '" + TypeName(width) + "'");
  // jinja2 appends "\n" to the value itself: anything but a string fails.
  RequireDefined(v);
  if (!v.is_string()) Fail("TypeError: unsupported operand type(s) for +=: '" + TypeName(v) + "' and 'str'");
  const Value& s = v;
  Args keep;
  const Value split = CallMethod(Value::Method(Value::String(s.s + "\n"), "splitlines"), keep);
  const List& lines = *split.list;
  std::string out;
  if (Truthy(b.get(2, Value::Bool(false)))) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + indention : "") + lines[i].s;
  } else {
    out = lines.empty() ? "" : lines[0].s;
    for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].s.empty() ? "" : indention) + lines[i].s;
  }
  if (Truthy(b.get(1, Value::Bool(false)))) out = indention + out;
  return Text(std::move(out), s.markup);
}

Value Replace(const Value& v, const Args& a) {
  Bound b(a, "replace", {"old", "new", "count"});
  const Value count = b.get(2, Value::None());
  Args method;
  method.positional = {Value::String(Str(b.get(0))), Value::String(Str(b.get(1))),
                       count.is_none() ? Value::Int(-1) : count};
  return CallMethod(Value::Method(Value::String(Str(v)), "replace"), method);
}

Value Round(const Value& v, const Args& a) {
  Bound b(a, "round", {"precision", "method"});
  const Value method = b.get(1, Value::String("common"));
  if (!method.is_string() || (method.s != "common" && method.s != "ceil" && method.s != "floor"))
    Fail("FilterArgumentError: method must be common, ceil or floor");
  const Value precision_value = b.get(0, Value::Int(0));
  if (!precision_value.is_int())
    Fail("TypeError: '" + TypeName(precision_value) + "' object cannot be interpreted as an integer");
  const int64_t precision = precision_value.as_int();
  RequireDefined(v);
  if (!v.is_number()) Fail("TypeError: type " + TypeName(v) + " doesn't define __round__ method");
  if (method.s == "common") {
    if (v.kind == Value::Kind::kFloat) return Value::Float(PyRound(v.f, precision));
    if (precision >= 0) return Value::Int(v.as_int());
    // round(int, -n): to a multiple of 10**n, ties to even.
    return Value::Int(static_cast<int64_t>(PyRound(static_cast<double>(v.as_int()), precision)));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_double() * scale;
  if (!std::isfinite(scaled)) Fail("OverflowError: cannot convert float infinity to integer");
  // math.ceil/floor return ints (no negative zero), then int / 10**n.
  const double whole = (method.s == "ceil" ? std::ceil(scaled) : std::floor(scaled)) + 0.0;
  return Value::Float(whole / scale);
}

Value Safe(const Value& v, const Args& a) {
  Bound(a, "safe", {});
  return Text(Str(v), true);
}

Value String(const Value& v, const Args& a) {
  Bound(a, "string", {});
  return SoftStr(v);
}

Value Trim(const Value& v, const Args& a) {
  Bound b(a, "trim", {"chars"});
  const Value s = SoftStr(v);
  return Text(StripChars(s.s, b.get(0, Value::None()), true, true), s.markup);
}

// transformers' override: json.dumps(x, ensure_ascii=False, indent=indent,
// separators=separators, sort_keys=sort_keys).
Value ToJson(const Value& v, const Args& a) {
  Bound b(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = Truthy(b.get(0, Value::Bool(false)));
  const Value indent = b.get(1, Value::None());
  if (!indent.is_none()) {
    o.indented = true;
    if (indent.is_string()) o.indent = indent.s;
    else if (indent.is_int()) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
    else Fail("TypeError: can't multiply sequence by non-int of type '" + TypeName(indent) + "'");
    o.item_separator = ",";
  }
  const Value separators = b.get(2, Value::None());
  if (!separators.is_none()) {
    const List parts = Iterate(separators);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      Fail("unsupported: tojson separators other than two strings");
    o.item_separator = parts[0].s;
    o.key_separator = parts[1].s;
  }
  o.sort_keys = Truthy(b.get(3, Value::Bool(false)));
  return Value::String(JsonDumps(v, o));
}

struct Entry {
  std::string_view name;
  FilterFn fn;
};

constexpr Entry kFilters[] = {
    {"abs", Abs},           {"capitalize", Capitalize}, {"center", Center},       {"count", Length},
    {"d", Default},         {"default", Default},       {"dictsort", DictSort},   {"first", First},
    {"float", Float},       {"format", Format},         {"indent", Indent},       {"int", Int},
    {"items", Items},       {"join", Join},             {"last", Last},           {"length", Length},
    {"list", ToList},       {"lower", Lower},           {"map", Map},             {"max", Max},
    {"min", Min},           {"reject", Reject},         {"rejectattr", RejectAttr}, {"replace", Replace},
    {"reverse", Reverse},   {"round", Round},           {"safe", Safe},           {"select", Select},
    {"selectattr", SelectAttr}, {"sort", Sort},         {"string", String},       {"sum", Sum},
    {"title", Title},       {"tojson", ToJson},         {"trim", Trim},           {"unique", Unique},
    {"upper", Upper},
};

}  // namespace
}  // namespace filters

FilterFn FindFilter(std::string_view name) {
  for (const auto& entry : filters::kFilters)
    if (entry.name == name) return entry.fn;
  return nullptr;
}

}  // namespace floe::jinja
