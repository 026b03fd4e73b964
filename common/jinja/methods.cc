// Attribute and item access as jinja2's sandbox does them, argument
// binding, and the methods of dict, list and the loop object.
#include <algorithm>
#include <iterator>

#include "common/jinja/builtins.h"
#include "common/jinja/str_methods.h"
#include "common/jinja/unicode.h"

namespace floe::jinja {
namespace {

constexpr std::string_view kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
// What the subset implements of them (plus dict, list and loop methods).
constexpr std::string_view kImplemented[] = {
    "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index", "isalnum", "isalpha",
    "isascii", "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle", "isupper", "join", "ljust",
    "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "title", "upper", "zfill",
    "get", "items", "keys", "values", "copy", "cycle", "changed"};

bool In(std::string_view name, const auto& names) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

std::string ObjectName(const Value& v) { return "'" + TypeName(v) + " object'"; }

Value Unsafe(const Value& obj, const std::string& name) {
  return Value::Undefined("SecurityError: access to attribute '" + name + "' of '" + TypeName(obj) +
                          "' object is unsafe.");
}

Value NoAttribute(const Value& obj, const std::string& name) {
  return Value::Undefined(ObjectName(obj) + " has no attribute '" + name + "'");
}

Value DictMethod(const Value& self, const std::string& name, const Args& args) {
  if (name == "get") {
    Bound b(args, name, {"key", "default"}, Bound::kPositionalOnly);
    const Value& key = b.get(0);
    if (!IsHashable(key)) Fail("TypeError: unhashable type: '" + TypeName(key) + "'");
    const Value* found = key.is_string() ? self.Find(key.s) : nullptr;
    return found ? *found : b.get(1, Value::None());
  }
  Bound(args, name, {});
  if (name == "copy") return Value::MakeDict(*self.dict);
  List out;
  out.reserve(self.dict->size());
  for (const auto& [k, v] : *self.dict) {
    if (name == "keys") out.push_back(Value::String(k));
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::Tuple({Value::String(k), v}));
  }
  return Value::MakeList(std::move(out), name == "keys"     ? Value::Seq::kDictKeys
                                         : name == "values" ? Value::Seq::kDictValues
                                                            : Value::Seq::kDictItems);
}

Value SequenceMethod(const Value& self, const std::string& name, const Args& args) {
  if (name == "copy") {
    Bound(args, name, {});
    return Value::MakeList(*self.list);
  }
  Bound b(args, name, {"value", "start", "stop"}, Bound::kPositionalOnly);
  if (b.has(1)) Fail("unsupported: " + name + "() with start/stop");
  int64_t n = 0;
  for (size_t i = 0; i < self.list->size(); ++i) {
    if (!Equal((*self.list)[i], b.get(0))) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++n;
  }
  if (name == "index") Fail("ValueError: " + Repr(b.get(0)) + " is not in " + TypeName(self));
  return Value::Int(n);
}

Value LoopMethod(const Value& self, const std::string& name, const Args& args) {
  Bound b(args, name, {}, Bound::kVarArgs);
  const List& values = b.varargs();
  LoopState& loop = *self.loop;
  if (name == "cycle") {
    if (values.empty()) Fail("TypeError: no items for cycling given");
    return values[static_cast<size_t>(loop.index0) % values.size()];
  }
  if (loop.changed_called && Equal(Value::Tuple(values), Value::Tuple(loop.changed_last))) return Value::Bool(false);
  loop.changed_called = true;
  loop.changed_last = values;
  return Value::Bool(true);
}

// jinja2's LoopContext attributes; last/nextitem look one item ahead,
// length/revindex drain the rest.
Value LoopAttr(const Value& obj, const std::string& name) {
  LoopState& loop = *obj.loop;
  const int64_t i = loop.index0;
  if (name == "index0") return Value::Int(i);
  if (name == "index") return Value::Int(i + 1);
  if (name == "revindex") return Value::Int(loop.Length() - i);
  if (name == "revindex0") return Value::Int(loop.Length() - i - 1);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(loop.ahead.empty() && !loop.Fetch());
  if (name == "length") return Value::Int(loop.Length());
  if (name == "depth") return Value::Int(1);
  if (name == "depth0") return Value::Int(0);
  if (name == "previtem") return loop.has_previous ? loop.previous : Value::Undefined("there is no previous item");
  if (name == "nextitem") {
    if (loop.ahead.empty() && !loop.Fetch()) return Value::Undefined("there is no next item");
    return loop.ahead.front();
  }
  if (name == "cycle" || name == "changed") return Value::Method(obj, name);
  return NoAttribute(obj, name);
}

}  // namespace

Bound::Bound(const Args& args, const std::string& function, std::initializer_list<const char*> params, int flags)
    : function_(function), names_(params), values_(params.size()) {
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < values_.size()) values_[i] = args.positional[i];
    else if (flags & kVarArgs) varargs_.push_back(args.positional[i]);
    else Fail("TypeError: " + function + "() takes at most " + std::to_string(values_.size()) + " argument(s) (" +
              std::to_string(args.positional.size()) + " given)");
  }
  for (const auto& [key, value] : args.keyword) {
    const auto at = std::find_if(names_.begin(), names_.end(), [&k = key](const char* n) { return k == n; });
    if (at != names_.end() && !(flags & kPositionalOnly)) {
      auto& slot = values_[static_cast<size_t>(at - names_.begin())];
      if (slot) Fail("TypeError: " + function + "() got multiple values for argument '" + key + "'");
      slot = value;
    } else if (flags & kVarKeywords) {
      varkw_.emplace_back(key, value);
    } else {
      Fail("TypeError: " + function + "() got an unexpected keyword argument '" + key + "'");
    }
  }
}

const Value& Bound::get(size_t i) const {
  if (!values_[i]) Fail("TypeError: " + function_ + "() missing required argument '" + names_[i] + "'");
  return *values_[i];
}

bool IsUnimplementedMethod(std::string_view name) {
  static constexpr std::string_view kOthers[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse",
                                                 "sort", "popitem", "setdefault", "update", "fromkeys"};
  return (In(name, kStrMethods) || In(name, kOthers)) && !In(name, kImplemented);
}

Value GetAttr(const Value& obj, const std::string& name) {
  using K = Value::Kind;
  switch (obj.kind) {
    case K::kUndefined:
      FailUndefined(obj);
    case K::kDict:
      if (name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy" || name == "fromkeys")
        return Value::Method(obj, name);
      if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
        return Unsafe(obj, name);
      if (const Value* found = obj.Find(name)) return *found;
      return NoAttribute(obj, name);
    case K::kNamespace:
      if (const Value* found = obj.Find(name)) return *found;
      return NoAttribute(obj, name);
    case K::kString:
      if (In(name, kStrMethods)) return Value::Method(obj, name);
      return NoAttribute(obj, name);
    case K::kList:
      if (name == "count" || name == "index") return Value::Method(obj, name);
      if (obj.seq == Value::Seq::kList) {
        if (name == "copy") return Value::Method(obj, name);
        if (name == "append" || name == "clear" || name == "extend" || name == "insert" || name == "pop" ||
            name == "remove" || name == "reverse" || name == "sort")
          return Unsafe(obj, name);
      }
      return NoAttribute(obj, name);
    case K::kLoop:
      return LoopAttr(obj, name);
    case K::kBool:
    case K::kInt:
      if (name == "real" || name == "numerator") return Value::Int(obj.as_int());
      if (name == "imag") return Value::Int(0);
      if (name == "denominator") return Value::Int(1);
      return NoAttribute(obj, name);
    case K::kFloat:
      if (name == "real") return obj;
      if (name == "imag") return Value::Float(0);
      return NoAttribute(obj, name);
    default:
      return NoAttribute(obj, name);
  }
}

Value GetItem(const Value& obj, const Value& key) {
  RequireDefined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* found = obj.Find(key.s)) return *found;
  } else if ((obj.is_string() || (obj.kind == Value::Kind::kList && obj.seq <= Value::Seq::kRange)) && key.is_int()) {
    int64_t i = key.as_int();
    if (obj.is_string()) {
      const std::u32string cps = Decode(obj.s);
      if (i < 0) i += static_cast<int64_t>(cps.size());
      if (i >= 0 && i < static_cast<int64_t>(cps.size())) {
        Value v = Value::String(Encode(cps.substr(static_cast<size_t>(i), 1)));
        v.markup = obj.markup;
        return v;
      }
    } else {
      if (i < 0) i += static_cast<int64_t>(obj.list->size());
      if (i >= 0 && i < static_cast<int64_t>(obj.list->size())) return (*obj.list)[static_cast<size_t>(i)];
    }
    return Value::Undefined(ObjectName(obj) + " has no element " + Repr(key));
  }
  // obj[key] failed: a string key falls back to the attribute.
  if (key.is_string()) return GetAttr(obj, key.s);
  return Value::Undefined(ObjectName(obj) + " has no element " + Repr(key));
}

Value CallMethod(const Value& method, const Args& args) {
  const Value& self = *method.self;
  const std::string& name = method.s;
  switch (self.kind) {
    case Value::Kind::kString:
      return CallStrMethod(self, name, args);
    case Value::Kind::kDict:
      if (name == "fromkeys") break;
      return DictMethod(self, name, args);
    case Value::Kind::kList:
      return SequenceMethod(self, name, args);
    case Value::Kind::kLoop:
      return LoopMethod(self, name, args);
    default:
      break;
  }
  Fail("unsupported: " + TypeName(self) + "." + name + "()");
}

Value AttributePath(const Value& item, const Value& path) {
  if (path.is_none()) return item;
  if (!path.is_string()) return GetItem(item, path);
  Value v = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.s.find('.', start);
    const std::string part = path.s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = GetItem(v, digits ? Value::Int(std::stoll(part)) : Value::String(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

}  // namespace floe::jinja
