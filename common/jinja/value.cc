#include "common/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/jinja/unicode.h"

namespace floe::jinja {

void Fail(std::string message) { throw Error{std::move(message)}; }

namespace {
thread_local int nesting = 0;
}  // namespace

NestingGuard::NestingGuard() {
  if (++nesting > 1000) {
    --nesting;
    Fail("RecursionError: maximum recursion depth exceeded");
  }
}
NestingGuard::~NestingGuard() { --nesting; }

void FailUndefined(const Value& v) { Fail(v.s.empty() ? "undefined value" : v.s); }

Value Value::MakeList(List items, Seq seq) {
  Value v;
  v.kind = Kind::kList;
  v.seq = seq;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict items) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::Namespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.kind = Kind::kNamespace;
  return v;
}

Value Value::Iterator(List items, std::string type_name) {
  auto list = std::make_shared<const List>(std::move(items));
  auto pos = std::make_shared<size_t>(0);
  Value v;
  v.kind = Kind::kIterator;
  v.iter = std::make_shared<IterState>();
  v.iter->pull = [list, pos](Value* out) {
    if (*pos >= list->size()) return false;
    *out = (*list)[(*pos)++];
    return true;
  };
  v.iter->type_name = std::move(type_name);
  return v;
}

Value Value::Generator(std::function<std::function<bool(Value*)>()> start, std::string type_name) {
  auto body = std::make_shared<std::function<bool(Value*)>>();
  Value v;
  v.kind = Kind::kIterator;
  v.iter = std::make_shared<IterState>();
  v.iter->pull = [start = std::move(start), body](Value* out) {
    if (!*body) *body = start();
    return (*body)(out);
  };
  v.iter->type_name = std::move(type_name);
  return v;
}

bool LoopState::Fetch() {
  if (exhausted) return false;
  Value item;
  if (!pull(&item)) {
    exhausted = true;
    return false;
  }
  ahead.push_back(std::move(item));
  return true;
}

bool LoopState::Advance(Value* out) {
  if (ahead.empty() && !Fetch()) return false;
  *out = std::move(ahead.front());
  ahead.pop_front();
  if (index0 >= 0) {
    previous = std::move(current);
    has_previous = true;
  }
  current = *out;
  ++index0;
  return true;
}

int64_t LoopState::Length() {
  while (Fetch()) {
  }
  return index0 + 1 + static_cast<int64_t>(ahead.size());
}

Value Value::Method(Value self, std::string name) {
  Value v;
  v.kind = Kind::kMethod;
  v.s = std::move(name);
  v.self = std::make_shared<const Value>(std::move(self));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  using T = nlohmann::json::value_t;
  NestingGuard guard;
  switch (j.type()) {
    case T::null:
      return None();
    case T::boolean:
      return Bool(j.get<bool>());
    case T::number_integer:
      return Int(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        Fail("integer " + std::to_string(u) + " is beyond the 64 bits this engine holds");
      return Int(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Float(j.get<double>());
    case T::string:
      return String(j.get<std::string>());
    case T::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return MakeList(std::move(items));
    }
    case T::object: {
      Dict items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(k, FromJson(e));
      return MakeDict(std::move(items));
    }
    default:
      Fail("a JSON value of this type cannot be a template variable");
  }
}

const Value* Value::Find(const std::string& key) const {
  if (!dict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

bool Truthy(const Value& v) {
  if (v.kind == Value::Kind::kLoop) return v.loop->Length() != 0;  // LoopContext has __len__
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    default:  // namespace, generator, loop (never empty inside its loop), callables
      return true;
  }
}

std::string FloatRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, end);  // [-]d[.ddd]e[+-]XX, shortest round trip
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exponent + 1)
    return sign + digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  return sign + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

namespace {

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : Decode(s)) {
    if (c == '\\' || c == static_cast<char32_t>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !IsPyPrintable(c))) {
      char hex[16];
      if (c < 0x100) std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(hex, sizeof hex, "\\U%08x", static_cast<unsigned>(c));
      out += hex;
    } else {
      AppendUtf8(c, &out);
    }
  }
  return out + quote;
}

std::string JoinRepr(const List& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + Repr(items[i]);
  return out;
}

}  // namespace

std::string Repr(const Value& v) {
  NestingGuard guard;
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kString:
      return v.markup ? "Markup(" + ReprString(v.s) + ")" : ReprString(v.s);
    default:
      return Str(v);
  }
}

std::string Str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return FloatRepr(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kList:
      switch (v.seq) {
        case Value::Seq::kList: return "[" + JoinRepr(*v.list) + "]";
        case Value::Seq::kTuple: return "(" + JoinRepr(*v.list) + (v.list->size() == 1 ? ",)" : ")");
        case Value::Seq::kRange: return v.s;
        case Value::Seq::kDictKeys: return "dict_keys([" + JoinRepr(*v.list) + "])";
        case Value::Seq::kDictValues: return "dict_values([" + JoinRepr(*v.list) + "])";
        case Value::Seq::kDictItems: return "dict_items([" + JoinRepr(*v.list) + "])";
      }
      break;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : *v.dict) {
        out += (first ? "" : ", ") + ReprString(k) + ": " + Repr(e);
        first = false;
      }
      out += "}";
      return v.kind == Value::Kind::kDict ? out : "<Namespace " + out + ">";
    }
    case Value::Kind::kLoop:
      return "<LoopContext " + std::to_string(v.loop->index0 + 1) + "/" + std::to_string(v.loop->Length()) + ">";
    case Value::Kind::kMacro:
      return "<Macro " + ReprString(v.s) + ">";
    case Value::Kind::kCallable:
      if (v.s == "dict") return "<class 'dict'>";  // range is jinja2's safe_range function
      if (v.s == "namespace") return "<class 'jinja2.utils.Namespace'>";
      break;
    default:
      break;
  }
  Fail("cannot print a " + TypeName(v) + ": jinja2 prints its memory address");
}

std::string TypeName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return v.markup ? "Markup" : "str";
    case Value::Kind::kList:
      switch (v.seq) {
        case Value::Seq::kList: return "list";
        case Value::Seq::kTuple: return "tuple";
        case Value::Seq::kRange: return "range";
        case Value::Seq::kDictKeys: return "dict_keys";
        case Value::Seq::kDictValues: return "dict_values";
        case Value::Seq::kDictItems: return "dict_items";
      }
      break;
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kIterator: return v.iter->type_name;
    case Value::Kind::kLoop: return "LoopContext";
    case Value::Kind::kMacro: return "Macro";
    case Value::Kind::kCallable: return v.s == "dict" || v.s == "namespace" ? "type" : "function";
    case Value::Kind::kMethod: return "builtin_function_or_method";
  }
  return "object";
}

namespace {

bool SameKeys(const List& a, const List& b) {  // set equality, for dict views
  if (a.size() != b.size()) return false;
  for (const Value& x : a)
    if (std::none_of(b.begin(), b.end(), [&](const Value& y) { return Equal(x, y); })) return false;
  return true;
}

}  // namespace

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  NestingGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.kind != K::kFloat && b.kind != K::kFloat) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.s == b.s;
    case K::kList: {
      if (a.list == b.list) return true;
      if (a.seq != b.seq) return false;
      if (a.seq == Value::Seq::kDictValues) return false;  // compared by identity in Python
      if (a.seq == Value::Seq::kDictKeys || a.seq == Value::Seq::kDictItems) return SameKeys(*a.list, *b.list);
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!Equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    }
    case K::kDict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = b.Find(k);
        if (!other || !Equal(v, *other)) return false;
      }
      return true;
    }
    case K::kCallable:
      return a.s == b.s;
    case K::kMethod:
      return a.s == b.s && a.self == b.self;
    default:  // identity
      return a.dict == b.dict && a.iter == b.iter && a.loop == b.loop && a.macro == b.macro;
  }
}

bool Less(const Value& a, const Value& b) {
  NestingGuard guard;
  RequireDefined(a);
  RequireDefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList && a.seq == b.seq &&
      (a.seq == Value::Seq::kList || a.seq == Value::Seq::kTuple)) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i)
      if (!Equal((*a.list)[i], (*b.list)[i])) return Less((*a.list)[i], (*b.list)[i]);
    return a.list->size() < b.list->size();
  }
  Fail("'<' not supported between instances of '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

List Iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return *v.list;
    case Value::Kind::kDict: {
      List keys;
      keys.reserve(v.dict->size());
      for (const auto& [k, e] : *v.dict) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t cp : Decode(v.s)) {
        std::string one;
        AppendUtf8(cp, &one);
        chars.push_back(Value::String(std::move(one)));
      }
      return chars;
    }
    case Value::Kind::kIterator: {
      List rest;
      Value item;
      while (v.iter->Next(&item)) rest.push_back(std::move(item));
      return rest;
    }
    default:
      Fail("'" + TypeName(v) + "' object is not iterable");
  }
}

std::function<bool(Value*)> Puller(const Value& v) {
  if (v.kind == Value::Kind::kIterator) return [it = v.iter](Value* out) { return it->Next(out); };
  struct Listed {
    Value source;
    std::optional<List> items;
    size_t pos = 0;
  };
  auto state = std::make_shared<Listed>();
  state->source = v;
  return [state](Value* out) {
    if (!state->items) state->items = Iterate(state->source);
    if (state->pos >= state->items->size()) return false;
    *out = (*state->items)[state->pos++];
    return true;
  };
}

int64_t Length(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePointCount(v.s));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict->size());
    case Value::Kind::kLoop:
      return v.loop->Length();
    default:
      Fail("object of type '" + TypeName(v) + "' has no len()");
  }
}

bool IsHashable(const Value& v) {
  NestingGuard guard;
  if (v.kind == Value::Kind::kDict) return false;
  if (v.kind != Value::Kind::kList || v.seq == Value::Seq::kRange) return true;
  if (v.seq != Value::Seq::kTuple) return false;
  return std::all_of(v.list->begin(), v.list->end(), IsHashable);
}

bool Contains(const Value& container, const Value& x) {
  switch (container.kind) {
    case Value::Kind::kString:
      if (!x.is_string())
        Fail("'in <string>' requires string as left operand, not " + TypeName(x));
      return container.s.find(x.s) != std::string::npos;
    case Value::Kind::kDict:
      if (!IsHashable(x)) Fail("TypeError: unhashable type: '" + TypeName(x) + "'");
      return x.is_string() && container.Find(x.s) != nullptr;
    case Value::Kind::kList:
      return std::any_of(container.list->begin(), container.list->end(), [&](const Value& e) { return Equal(e, x); });
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kIterator: {
      Value item;
      while (container.iter->Next(&item))
        if (Equal(item, x)) return true;
      return false;
    }
    default:
      Fail("argument of type '" + TypeName(container) + "' is not iterable");
  }
}

}  // namespace floe::jinja
