#include "common/jinja/builtins.h"

#include <algorithm>
#include <cmath>

#include "common/jinja/renderer.h"

namespace floe::jinja {
namespace {

// Python's str.isspace() code points.
bool IsPySpace(const std::string& cp) {
  if (cp.size() == 1) {
    const unsigned char c = static_cast<unsigned char>(cp[0]);
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  }
  static const char* kSpaces[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004",
                                  "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029",
                                  "\u202f", "\u205f", "\u3000"};
  for (const char* s : kSpaces)
    if (cp == s) return true;
  return false;
}

std::string Join(const std::vector<std::string>& cps, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to; ++i) out += cps[i];
  return out;
}

std::string AsString(const Value& v, const char* what) {
  if (!v.is_string()) Fail(std::string(what) + " must be a string, not " + TypeName(v));
  return v.s;
}

int64_t AsInt(const Value& v, const char* what) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b;
  Fail(std::string(what) + " must be an integer, not " + TypeName(v));
}

std::vector<std::string> SplitWhitespace(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> cps = CodePoints(s), out;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, with its trailing whitespace stripped.
      size_t end = cps.size();
      while (end > i && IsPySpace(cps[end - 1])) --end;
      out.push_back(Join(cps, i, end));
      return out;
    }
    size_t start = i;
    while (i < cps.size() && !IsPySpace(cps[i])) ++i;
    out.push_back(Join(cps, start, i));
  }
  return out;
}

std::vector<std::string> SplitOn(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (sep.empty()) Fail("empty separator");
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    out.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

Value StringList(const std::vector<std::string>& parts) {
  Value::List items;
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::MakeList(std::move(items));
}

std::string AsciiMap(const std::string& s, int (*f)(int)) {
  std::string out = s;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
  return out;
}

bool PrefixMatch(const std::string& s, const Value& prefix, bool end) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return end ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0;
  };
  if (prefix.kind == Value::Kind::kList) {
    for (const Value& p : *prefix.list)
      if (one(AsString(p, "startswith/endswith argument"))) return true;
    return false;
  }
  return one(AsString(prefix, "startswith/endswith argument"));
}

std::string Title(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (char c : s) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    out += alpha ? static_cast<char>(previous_cased ? std::tolower(c) : std::toupper(c)) : c;
    previous_cased = alpha;
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = AsciiMap(s, [](int c) { return std::tolower(c); });
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) out[0] = static_cast<char>(std::toupper(out[0]));
  return out;
}

Value Attribute(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_mapping()) {
      const Value* found = v.Find(key);
      v = found ? *found : Value::Undefined(key);
    } else if (v.kind == Value::Kind::kList && !key.empty() && std::isdigit(static_cast<unsigned char>(key[0]))) {
      const size_t i = std::stoul(key);
      v = i < v.list->size() ? (*v.list)[i] : Value::Undefined(key);
    } else {
      v = Value::Undefined(key);
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

}  // namespace

Value Args::Get(size_t index, const std::string& name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return fallback;
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<std::string> cps = CodePoints(s);
  std::vector<std::string> set;
  const bool whitespace = chars.is_undefined() || chars.kind == Value::Kind::kNone;
  if (!whitespace) set = CodePoints(AsString(chars, "strip argument"));
  auto strip = [&](const std::string& cp) {
    return whitespace ? IsPySpace(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strip(cps[begin])) ++begin;
  if (right)
    while (end > begin && strip(cps[end - 1])) --end;
  return Join(cps, begin, end);
}

std::vector<Value> Iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return *v.list;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, e] : *v.dict) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (auto& cp : CodePoints(v.s)) chars.push_back(Value::String(cp));
      return chars;
    }
    default:
      Fail(std::string("'") + TypeName(v) + "' object is not iterable");
  }
}

Value CallMethod(const Value& obj, const std::string& name, const Args& args) {
  if (obj.is_undefined()) Fail("'" + obj.s + "' is undefined");
  if (obj.is_string()) {
    const std::string& s = obj.s;
    if (name == "strip") return Value::String(Strip(s, args.Get(0, "chars"), true, true));
    if (name == "lstrip") return Value::String(Strip(s, args.Get(0, "chars"), true, false));
    if (name == "rstrip") return Value::String(Strip(s, args.Get(0, "chars"), false, true));
    if (name == "startswith") return Value::Bool(PrefixMatch(s, args.Get(0, "prefix"), false));
    if (name == "endswith") return Value::Bool(PrefixMatch(s, args.Get(0, "suffix"), true));
    if (name == "split" || name == "rsplit") {
      const Value sep = args.Get(0, "sep");
      const Value maxsplit = args.Get(1, "maxsplit", Value::Int(-1));
      const int64_t n = AsInt(maxsplit, "maxsplit");
      if (name == "rsplit" && n >= 0) Fail("rsplit with maxsplit is not supported");
      if (sep.is_undefined() || sep.kind == Value::Kind::kNone) return StringList(SplitWhitespace(s, n));
      return StringList(SplitOn(s, AsString(sep, "sep"), n));
    }
    if (name == "replace") {
      const std::string from = AsString(args.Get(0, "old"), "old");
      const std::string to = AsString(args.Get(1, "new"), "new");
      int64_t count = AsInt(args.Get(2, "count", Value::Int(-1)), "count");
      if (from.empty()) Fail("replace of an empty string is not supported");
      std::string out;
      size_t start = 0;
      for (;;) {
        const size_t at = count == 0 ? std::string::npos : s.find(from, start);
        if (at == std::string::npos) break;
        out += s.substr(start, at - start) + to;
        start = at + from.size();
        if (count > 0) --count;
      }
      return Value::String(out + s.substr(start));
    }
    if (name == "upper") return Value::String(AsciiMap(s, [](int c) { return std::toupper(c); }));
    if (name == "lower") return Value::String(AsciiMap(s, [](int c) { return std::tolower(c); }));
    if (name == "title") return Value::String(Title(s));
    if (name == "capitalize") return Value::String(Capitalize(s));
    if (name == "find" || name == "index") {
      const size_t at = s.find(AsString(args.Get(0, "sub"), "sub"));
      if (at == std::string::npos) {
        if (name == "index") Fail("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(CodePoints(s.substr(0, at)).size()));
    }
    if (name == "count") {
      const std::string sub = AsString(args.Get(0, "sub"), "sub");
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePoints(s).size()) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::Int(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& item : Iterate(args.Get(0, "iterable"))) {
        if (!first) out += s;
        out += AsString(item, "join item");
        first = false;
      }
      return Value::String(out);
    }
    if (name == "splitlines") {
      std::vector<std::string> lines;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          lines.push_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) lines.push_back(s.substr(start));
      return StringList(lines);
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace") {
      if (s.empty()) return Value::Bool(false);
      for (const std::string& cp : CodePoints(s)) {
        const unsigned char c = static_cast<unsigned char>(cp[0]);
        const bool ok = name == "isspace" ? IsPySpace(cp)
                        : cp.size() != 1  ? false
                        : name == "isdigit" ? std::isdigit(c) != 0
                                            : std::isalpha(c) != 0;
        if (!ok) return Value::Bool(false);
      }
      return Value::Bool(true);
    }
  }
  if (obj.is_mapping()) {
    if (name == "items") {
      Value::List items;
      for (const auto& [k, v] : *obj.dict) items.push_back(Value::MakeList({Value::String(k), v}));
      return Value::MakeList(std::move(items));
    }
    if (name == "keys") {
      Value::List keys;
      for (const auto& [k, v] : *obj.dict) keys.push_back(Value::String(k));
      return Value::MakeList(std::move(keys));
    }
    if (name == "values") {
      Value::List values;
      for (const auto& [k, v] : *obj.dict) values.push_back(v);
      return Value::MakeList(std::move(values));
    }
    if (name == "get") {
      const Value key = args.Get(0, "key");
      const Value* found = key.is_string() ? obj.Find(key.s) : nullptr;
      return found ? *found : args.Get(1, "default", Value::None());
    }
  }
  if (obj.kind == Value::Kind::kList) {
    if (name == "count" || name == "index") {
      const Value x = args.Get(0, "value");
      int64_t n = 0;
      for (size_t i = 0; i < obj.list->size(); ++i) {
        if (!Equal((*obj.list)[i], x)) continue;
        if (name == "index") return Value::Int(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") Fail("value is not in list");
      return Value::Int(n);
    }
  }
  Fail(std::string("'") + TypeName(obj) + "' object has no attribute '" + name + "'");
}

bool ApplyTest(const std::string& name, const Value& v, const Args& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.kind == K::kDict;
  if (name == "iterable") return v.kind == K::kList || v.kind == K::kDict || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.kind == K::kList || v.kind == K::kDict || v.is_string();
  if (name == "callable") return v.kind == K::kMacro || v.kind == K::kFunction;
  const Value other = args.Get(0, "other");
  if (name == "equalto" || name == "eq" || name == "==") return Equal(v, other);
  if (name == "ne" || name == "!=") return !Equal(v, other);
  if (name == "lt" || name == "<") return Less(v, other);
  if (name == "le" || name == "<=") return !Less(other, v);
  if (name == "gt" || name == ">") return Less(other, v);
  if (name == "ge" || name == ">=") return !Less(v, other);
  if (name == "in") {
    for (const Value& item : Iterate(other))
      if (Equal(item, v)) return true;
    if (other.is_string() && v.is_string()) return other.s.find(v.s) != std::string::npos;
    return false;
  }
  if (name == "odd") return AsInt(v, "odd") % 2 != 0;
  if (name == "even") return AsInt(v, "even") % 2 == 0;
  if (name == "divisibleby") return AsInt(v, "divisibleby") % AsInt(other, "divisibleby") == 0;
  if (name == "lower") return v.is_string() && v.s == AsciiMap(v.s, [](int c) { return std::tolower(c); });
  if (name == "upper") return v.is_string() && v.s == AsciiMap(v.s, [](int c) { return std::toupper(c); });
  if (name == "sameas") {
    if (v.kind != other.kind) return false;
    if (v.kind == K::kNone) return true;
    if (v.kind == K::kBool) return v.b == other.b;
    return v.list == other.list && v.dict == other.dict;
  }
  Fail("unknown test " + name);
}

Value ApplyFilter(Renderer& renderer, const std::string& name, const Value& v, const Args& args) {
  using K = Value::Kind;
  if (name == "safe" || name == "string") return name == "safe" ? v : Value::String(Str(v));
  if (name == "default" || name == "d") {
    const bool boolean = Truthy(args.Get(1, "boolean", Value::Bool(false)));
    if (v.is_undefined() || (boolean && !Truthy(v))) return args.Get(0, "default_value", Value::String(""));
    return v;
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(static_cast<int64_t>(CodePoints(v.s).size()));
    if (v.kind == K::kList) return Value::Int(static_cast<int64_t>(v.list->size()));
    if (v.is_mapping()) return Value::Int(static_cast<int64_t>(v.dict->size()));
    if (v.is_undefined()) return Value::Int(0);
    Fail(std::string("object of type '") + TypeName(v) + "' has no len()");
  }
  if (name == "trim") {
    if (v.is_undefined()) return Value::String("");
    return Value::String(Strip(Str(v), args.Get(0, "chars"), true, true));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    const std::string s = Str(v);
    if (name == "upper") return Value::String(AsciiMap(s, [](int c) { return std::toupper(c); }));
    if (name == "lower") return Value::String(AsciiMap(s, [](int c) { return std::tolower(c); }));
    if (name == "capitalize") return Value::String(Capitalize(s));
    return Value::String(Title(s));
  }
  if (name == "replace") {
    Args method_args;
    method_args.positional = {args.Get(0, "old"), args.Get(1, "new"), args.Get(2, "count", Value::Int(-1))};
    return CallMethod(Value::String(Str(v)), "replace", method_args);
  }
  if (name == "tojson") {
    const Value indent = args.Get(0, "indent", Value::None());
    const Value separators = args.Get(1, "separators", Value::None());
    const bool sort_keys = Truthy(args.Get(2, "sort_keys", Value::Bool(false)));
    const int width = indent.kind == K::kNone ? -1 : static_cast<int>(AsInt(indent, "indent"));
    std::string item_sep = width < 0 ? ", " : ",", key_sep = ": ";
    if (separators.kind == K::kList && separators.list->size() == 2) {
      item_sep = AsString((*separators.list)[0], "separators");
      key_sep = AsString((*separators.list)[1], "separators");
    }
    return Value::String(ToJson(v, width, item_sep, key_sep, sort_keys));
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = Iterate(v);
    if (items.empty()) return Value::Undefined("first");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Value attribute = args.Get(1, "attribute");
    const std::string sep = Str(args.Get(0, "d", Value::String("")));
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(v)) {
      if (!first) out += sep;
      out += Str(attribute.is_undefined() ? item : Attribute(item, Str(attribute)));
      first = false;
    }
    return Value::String(out);
  }
  if (name == "list") return Value::MakeList(Iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::MakeList({});
    return CallMethod(v, "items", Args());
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = CodePoints(v.s);
      std::reverse(cps.begin(), cps.end());
      return Value::String(Join(cps, 0, cps.size()));
    }
    std::vector<Value> items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "int") {
    if (v.kind == K::kInt) return v;
    if (v.kind == K::kBool) return Value::Int(v.b);
    if (v.kind == K::kFloat) return Value::Int(static_cast<int64_t>(v.f));
    if (v.is_string()) {
      try {
        size_t used = 0;
        const int64_t x = std::stoll(v.s, &used);
        if (used == v.s.size()) return Value::Int(x);
      } catch (...) {
      }
    }
    return args.Get(0, "default", Value::Int(0));
  }
  if (name == "float") {
    if (v.kind == K::kFloat) return v;
    if (v.kind == K::kInt || v.kind == K::kBool) return Value::Float(v.kind == K::kInt ? v.i : v.b);
    if (v.is_string()) {
      try {
        size_t used = 0;
        const double x = std::stod(v.s, &used);
        if (used == v.s.size()) return Value::Float(x);
      } catch (...) {
      }
    }
    return args.Get(0, "default", Value::Float(0));
  }
  if (name == "abs") {
    if (v.kind == K::kInt) return Value::Int(v.i < 0 ? -v.i : v.i);
    if (v.kind == K::kFloat) return Value::Float(std::fabs(v.f));
    Fail(std::string("bad operand type for abs(): '") + TypeName(v) + "'");
  }
  if (name == "round") {
    const int64_t precision = AsInt(args.Get(0, "precision", Value::Int(0)), "precision");
    const std::string method = Str(args.Get(1, "method", Value::String("common")));
    if (!v.is_number()) Fail("round needs a number");
    const double x = v.kind == K::kFloat ? v.f : static_cast<double>(v.kind == K::kInt ? v.i : v.b);
    const double scale = std::pow(10.0, static_cast<double>(precision));
    double r = x * scale;
    r = method == "floor" ? std::floor(r) : method == "ceil" ? std::ceil(r) : std::round(r);
    return Value::Float(r / scale);
  }
  if (name == "indent") {
    const Value width_value = args.Get(0, "width", Value::Int(4));
    const std::string pad = width_value.is_string() ? width_value.s : std::string(AsInt(width_value, "width"), ' ');
    const bool first = Truthy(args.Get(1, "first", Value::Bool(false)));
    const bool blank = Truthy(args.Get(2, "blank", Value::Bool(false)));
    std::string s = Str(v), out;
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (i == s.size() || s[i] == '\n') {
        lines.push_back(s.substr(start, i - start));
        start = i + 1;
      }
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n";
      const bool pad_it = (i > 0 || first) && (blank || !Strip(lines[i], Value::None(), true, true).empty());
      out += (pad_it ? pad : "") + lines[i];
    }
    return Value::String(out);
  }
  if (name == "map" || name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    std::vector<Value> out;
    const bool attr = name == "selectattr" || name == "rejectattr";
    for (const Value& item : Iterate(v)) {
      if (name == "map") {
        const Value attribute = args.Get(99, "attribute");
        if (!attribute.is_undefined()) {
          Value got = Attribute(item, Str(attribute));
          if (got.is_undefined()) got = args.Get(99, "default", got);
          out.push_back(got);
        } else {
          Args rest;
          rest.positional.assign(args.positional.begin() + std::min<size_t>(1, args.positional.size()),
                                 args.positional.end());
          out.push_back(ApplyFilter(renderer, Str(args.Get(0, "")), item, rest));
        }
        continue;
      }
      const Value subject = attr ? Attribute(item, Str(args.Get(0, "attribute"))) : item;
      const size_t test_at = attr ? 1 : 0;
      bool passed;
      if (args.positional.size() <= test_at) {
        passed = Truthy(subject);
      } else {
        Args test_args;
        test_args.positional.assign(args.positional.begin() + test_at + 1, args.positional.end());
        passed = ApplyTest(Str(args.positional[test_at]), subject, test_args);
      }
      if (passed == (name == "select" || name == "selectattr")) out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "unique") {
    std::vector<Value> out;
    for (const Value& item : Iterate(v)) {
      bool seen = false;
      for (const Value& o : out) seen |= Equal(o, item);
      if (!seen) out.push_back(item);
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "sort") {
    std::vector<Value> items = Iterate(v);
    const bool reverse = Truthy(args.Get(0, "reverse", Value::Bool(false)));
    const Value attribute = args.Get(2, "attribute");
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value x = attribute.is_undefined() ? a : Attribute(a, Str(attribute));
      const Value y = attribute.is_undefined() ? b : Attribute(b, Str(attribute));
      return reverse ? Less(y, x) : Less(x, y);
    });
    return Value::MakeList(std::move(items));
  }
  if (name == "min" || name == "max") {
    std::vector<Value> items = Iterate(v);
    if (items.empty()) return Value::Undefined(name);
    Value best = items[0];
    for (const Value& item : items)
      if (name == "min" ? Less(item, best) : Less(best, item)) best = item;
    return best;
  }
  if (name == "sum") {
    Value total = args.Get(1, "start", Value::Int(0));
    for (const Value& item : Iterate(v)) total = renderer.Add(total, item);
    return total;
  }
  Fail("unknown filter " + name);
}

}  // namespace floe::jinja
