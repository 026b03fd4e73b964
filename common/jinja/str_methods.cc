// Python's str methods on template strings, and markupsafe's Markup
// versions of them for |safe strings.
#include "common/jinja/str_methods.h"

#include <algorithm>

#include "common/jinja/operators.h"
#include "common/jinja/pyformat.h"
#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace {

const std::string& Text(const Value& v, const std::string& what) {
  if (!v.is_string()) Fail("TypeError: " + what + " must be str, not " + TypeName(v));
  return v.s;
}

int64_t Integer(const Value& v, const std::string& what) {
  if (!v.is_int()) Fail("TypeError: " + what + " must be an integer, not " + TypeName(v));
  return v.as_int();
}

Value StringList(const std::vector<std::string>& parts) {
  List items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::MakeList(std::move(items));
}

// Python's slice bounds for find/count/startswith: code points [start, end).
bool SliceBounds(const std::u32string& s, const Bound& b, size_t first, size_t* start, size_t* end) {
  const int64_t n = static_cast<int64_t>(s.size());
  int64_t lo = 0, hi = n;
  if (b.has(first) && !b.get(first).is_none()) lo = Integer(b.get(first), "slice index");
  if (b.has(first + 1) && !b.get(first + 1).is_none()) hi = Integer(b.get(first + 1), "slice index");
  if (hi > n) hi = n;
  else if (hi < 0) hi = std::max<int64_t>(hi + n, 0);
  if (lo < 0) lo = std::max<int64_t>(lo + n, 0);
  *start = static_cast<size_t>(lo);
  *end = static_cast<size_t>(hi);
  return lo <= n;
}

std::vector<std::string> SplitWhitespace(const std::u32string& s, int64_t maxsplit, bool from_right) {
  std::vector<std::u32string> parts;
  const size_t n = s.size();
  if (!from_right) {
    size_t i = 0;
    while (maxsplit-- != 0) {
      while (i < n && IsPySpace(s[i])) ++i;
      if (i == n) break;
      const size_t j = i;
      while (i < n && !IsPySpace(s[i])) ++i;
      parts.push_back(s.substr(j, i - j));
    }
    while (i < n && IsPySpace(s[i])) ++i;
    if (i < n) parts.push_back(s.substr(i));
  } else {
    size_t i = n;
    while (maxsplit-- != 0) {
      while (i > 0 && IsPySpace(s[i - 1])) --i;
      if (i == 0) break;
      const size_t j = i;
      while (i > 0 && !IsPySpace(s[i - 1])) --i;
      parts.insert(parts.begin(), s.substr(i, j - i));
    }
    while (i > 0 && IsPySpace(s[i - 1])) --i;
    if (i > 0) parts.insert(parts.begin(), s.substr(0, i));
  }
  std::vector<std::string> out;
  for (const auto& p : parts) out.push_back(Encode(p));
  return out;
}

std::vector<std::string> SplitOn(const std::string& s, const std::string& sep, int64_t maxsplit, bool from_right) {
  if (sep.empty()) Fail("ValueError: empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    size_t start = 0;
    for (size_t at; maxsplit-- != 0 && (at = s.find(sep, start)) != std::string::npos; start = at + sep.size())
      out.push_back(s.substr(start, at - start));
    out.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    for (size_t at; maxsplit-- != 0 && end >= sep.size() && (at = s.rfind(sep, end - sep.size())) != std::string::npos;
         end = at)
      out.insert(out.begin(), s.substr(at + sep.size(), end - at - sep.size()));
    out.insert(out.begin(), s.substr(0, end));
  }
  return out;
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

Value SplitLines(const std::string& s, bool keepends) {
  const std::u32string cps = Decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!IsLineBreak(cps[i])) continue;
    size_t eol = i + 1;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++eol;
    lines.push_back(Encode(cps.substr(start, (keepends ? eol : i) - start)));
    start = eol;
    i = eol - 1;
  }
  if (start < cps.size()) lines.push_back(Encode(cps.substr(start)));
  return StringList(lines);
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python puts `to` around every character
    const std::u32string cps = Decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t start = 0;
  for (size_t at; count != 0 && (at = s.find(from, start)) != std::string::npos; start = at + from.size(), --count)
    out += s.substr(start, at - start) + to;
  return out + s.substr(start);
}

std::string Justify(const std::string& s, const Bound& b, char how) {
  const int64_t width = Integer(b.get(0), "width");
  std::u32string fill = U" ";
  if (b.has(1)) {
    fill = Decode(Text(b.get(1), "fillchar"));
    if (fill.size() != 1) Fail("TypeError: The fill character must be exactly one character long");
  }
  const int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return s;
  const int64_t pad = width - len;
  auto fills = [&](int64_t k) { return Encode(std::u32string(static_cast<size_t>(k), fill[0])); };
  if (how == '<') return s + fills(pad);
  if (how == '>') return fills(pad) + s;
  // str.center: the odd space goes left when the width is odd.
  const int64_t left = pad / 2 + (pad & width & 1);
  return fills(left) + s + fills(pad - left);
}

bool IsTitle(const std::string& s) {
  bool cased = false, previous_cased = false;
  for (char32_t c : Decode(s)) {
    if (IsPyUpper(c) || IsPyTitle(c)) {
      if (previous_cased) return false;
      previous_cased = cased = true;
    } else if (IsPyLower(c)) {
      if (!previous_cased) return false;
      previous_cased = cased = true;
    } else {
      previous_cased = false;
    }
  }
  return cased;
}


Value AsMarkup(Value v) {
  v.markup = true;
  return v;
}

// markupsafe's Markup methods: those returning strings escape their string
// arguments and return Markup; join escapes the items, format the fields.
Value MarkupMethod(const Value& self, const std::string& name, const Args& args) {
  const Value plain = Value::String(self.s);
  auto escaped = [](const Value& v) { return v.is_string() && !v.markup ? Value::String(HtmlEscape(v.s)) : v; };
  if (name == "capitalize" || name == "title" || name == "lower" || name == "upper" || name == "replace" ||
      name == "ljust" || name == "rjust" || name == "lstrip" || name == "rstrip" || name == "center" ||
      name == "strip" || name == "zfill" || name == "partition" || name == "rpartition") {
    Args safe;
    for (const Value& v : args.positional) safe.positional.push_back(escaped(v));
    for (const auto& [k, v] : args.keyword) safe.keyword.emplace_back(k, escaped(v));
    Value result = CallStrMethod(plain, name, safe);
    if (result.is_string()) return AsMarkup(std::move(result));
    List parts;  // partition's tuple
    for (const Value& part : *result.list) parts.push_back(AsMarkup(part));
    return Value::Tuple(std::move(parts));
  }
  if (name == "split" || name == "rsplit" || name == "splitlines") {
    List parts;
    for (const Value& part : *CallStrMethod(plain, name, args).list) parts.push_back(AsMarkup(part));
    return Value::MakeList(std::move(parts));
  }
  if (name == "join") {
    Bound b(args, name, {"iterable"}, Bound::kPositionalOnly);
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(b.get(0))) {
      if (!first) out += self.s;
      out += item.is_string() && item.markup ? item.s : HtmlEscape(Str(item));
      first = false;
    }
    return AsMarkup(Value::String(out));
  }
  if (name == "format") {
    Bound b(args, name, {}, Bound::kVarArgs | Bound::kVarKeywords);
    return AsMarkup(Value::String(StrFormat(self.s, b.varargs(), b.varkw(), /*escape=*/true)));
  }
  return CallStrMethod(plain, name, args);
}

}  // namespace

Value CallStrMethod(const Value& self, const std::string& name, const Args& args) {
  if (self.markup) return MarkupMethod(self, name, args);
  const std::string& s = self.s;
  using F = Bound::Flags;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Bound b(args, name, {"chars"}, F::kPositionalOnly);
    return Value::String(StripChars(s, b.get(0, Value::None()), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Bound b(args, name, {"sep", "maxsplit"});
    const Value sep = b.get(0, Value::None());
    const int64_t maxsplit = Integer(b.get(1, Value::Int(-1)), "maxsplit");
    if (sep.is_none()) return StringList(SplitWhitespace(Decode(s), maxsplit, name == "rsplit"));
    return StringList(SplitOn(s, Text(sep, "sep"), maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") {
    Bound b(args, name, {"keepends"});
    return SplitLines(s, Truthy(b.get(0, Value::Bool(false))));
  }
  if (name == "replace") {
    Bound b(args, name, {"old", "new", "count"}, F::kPositionalOnly);
    return Value::String(Replace(s, Text(b.get(0), "replace() argument 1"), Text(b.get(1), "replace() argument 2"),
                                 Integer(b.get(2, Value::Int(-1)), "count")));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "casefold") {
    Bound(args, name, {});
    return Value::String(name == "upper"   ? PyUpper(s)
                         : name == "lower" ? PyLower(s)
                         : name == "title" ? PyTitle(s)
                         : name == "capitalize" ? PyCapitalize(s)
                                                : PyCasefold(s));
  }
  if (name == "startswith" || name == "endswith") {
    Bound b(args, name, {"prefix", "start", "end"}, F::kPositionalOnly);
    const std::u32string cps = Decode(s);
    size_t start, end;
    if (!SliceBounds(cps, b, 1, &start, &end)) return Value::Bool(false);
    const std::u32string part = start < end ? cps.substr(start, end - start) : U"";
    List choices = {b.get(0)};
    if (b.get(0).is_list(Value::Seq::kTuple)) choices = *b.get(0).list;
    for (const Value& c : choices) {
      if (!c.is_string())
        Fail("TypeError: " + name + " first arg must be str or a tuple of str, not " + TypeName(c));
      const std::u32string p = Decode(c.s);
      if (p.size() > part.size()) continue;
      if (name == "startswith" ? part.compare(0, p.size(), p) == 0 : part.compare(part.size() - p.size(), p.size(), p) == 0)
        return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Bound b(args, name, {"sub", "start", "end"}, F::kPositionalOnly);
    const std::u32string cps = Decode(s), sub = Decode(Text(b.get(0), "must be str"));
    size_t start, end;
    const bool in_range = SliceBounds(cps, b, 1, &start, &end);
    if (name == "count") {
      if (!in_range || end < start || end - start < sub.size()) return Value::Int(in_range && sub.empty() && end >= start ? 1 : 0);
      if (sub.empty()) return Value::Int(static_cast<int64_t>(end - start + 1));
      int64_t n = 0;
      for (size_t at = cps.find(sub, start); at != std::u32string::npos && at + sub.size() <= end; at = cps.find(sub, at + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t found = std::u32string::npos;
    if (in_range && end >= start && end - start >= sub.size()) {
      if (name[0] == 'r') {
        found = cps.rfind(sub, end - sub.size());
        if (found != std::u32string::npos && found < start) found = std::u32string::npos;
      } else {
        found = cps.find(sub, start);
        if (found != std::u32string::npos && found + sub.size() > end) found = std::u32string::npos;
      }
    }
    if (found == std::u32string::npos) {
      if (name == "index" || name == "rindex") Fail("ValueError: substring not found");
      return Value::Int(-1);
    }
    return Value::Int(static_cast<int64_t>(found));
  }
  if (name == "join") {
    Bound b(args, name, {"iterable"}, F::kPositionalOnly);
    std::string out;
    size_t k = 0;
    for (const Value& item : Iterate(b.get(0))) {
      if (!item.is_string())
        Fail("TypeError: sequence item " + std::to_string(k) + ": expected str instance, " + TypeName(item) + " found");
      if (k++) out += s;
      out += item.s;
    }
    return Value::String(out);
  }
  if (name == "format") {
    Bound b(args, name, {}, F::kVarArgs | F::kVarKeywords);
    return Value::String(StrFormat(s, b.varargs(), b.varkw()));
  }
  if (name == "partition" || name == "rpartition") {
    Bound b(args, name, {"sep"}, F::kPositionalOnly);
    const std::string& sep = Text(b.get(0), "sep");
    if (sep.empty()) Fail("ValueError: empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return name == "partition" ? Value::Tuple({Value::String(s), Value::String(""), Value::String("")})
                                 : Value::Tuple({Value::String(""), Value::String(""), Value::String(s)});
    return Value::Tuple({Value::String(s.substr(0, at)), Value::String(sep), Value::String(s.substr(at + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Bound b(args, name, {"fix"}, F::kPositionalOnly);
    const std::string& fix = Text(b.get(0), name + "() argument");
    if (name == "removeprefix") return Value::String(s.rfind(fix, 0) == 0 ? s.substr(fix.size()) : s);
    const bool ends = s.size() >= fix.size() && s.compare(s.size() - fix.size(), fix.size(), fix) == 0;
    return Value::String(ends && !fix.empty() ? s.substr(0, s.size() - fix.size()) : s);
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    Bound b(args, name, {"width", "fillchar"}, F::kPositionalOnly);
    return Value::String(Justify(s, b, name == "ljust" ? '<' : name == "rjust" ? '>' : '^'));
  }
  if (name == "zfill") {
    Bound b(args, name, {"width"}, F::kPositionalOnly);
    const int64_t width = Integer(b.get(0), "width"), len = static_cast<int64_t>(CodePointCount(s));
    if (width <= len) return Value::String(s);
    const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    return Value::String(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
  }
  Bound(args, name, {});
  const std::u32string cps = Decode(s);
  auto all = [&](auto pred) { return Value::Bool(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred)); };
  if (name == "isdigit") return all(IsPyDigit);
  if (name == "isdecimal") return all(IsPyDecimal);
  if (name == "isnumeric") return all(IsPyNumeric);
  if (name == "isalpha") return all(IsPyAlpha);
  if (name == "isspace") return all(IsPySpace);
  if (name == "isalnum") return all([](char32_t c) { return IsPyAlpha(c) || IsPyDecimal(c) || IsPyDigit(c) || IsPyNumeric(c); });
  if (name == "isascii") return Value::Bool(std::all_of(cps.begin(), cps.end(), [](char32_t c) { return c < 0x80; }));
  if (name == "islower") return Value::Bool(PyIsLower(s));
  if (name == "isupper") return Value::Bool(PyIsUpper(s));
  if (name == "istitle") return Value::Bool(IsTitle(s));
  Fail("unsupported: str." + name + "()");
}


std::string StripChars(const std::string& s, const Value& chars, bool left, bool right) {
  if (chars.is_none() || chars.is_undefined()) return std::string(PyStripSpace(s, left, right));
  const std::u32string cps = Decode(s), set = Decode(Text(chars, "strip arg"));
  size_t begin = 0, end = cps.size();
  auto strip = [&](char32_t c) { return set.find(c) != std::u32string::npos; };
  if (left)
    while (begin < end && strip(cps[begin])) ++begin;
  if (right)
    while (end > begin && strip(cps[end - 1])) --end;
  return Encode(cps.substr(begin, end - begin));
}

}  // namespace floe::jinja
