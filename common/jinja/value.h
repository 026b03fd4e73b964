// Runtime values of the Jinja subset: Python's types as jinja2 sees them
// (None, bool, int, float, str, list, dict, plus Undefined, namespace()
// objects and macros), with Python's printing, comparison and truthiness.
// Immutable once built, except a namespace's attributes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace floe::jinja {

struct MacroDef;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kMacro, kFunction };
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, like Python's dict

  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                      // string; function name; undefined's name (for messages)
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;         // dict and namespace (mutable only for namespace)
  const MacroDef* macro = nullptr;

  static Value Undefined(std::string name = "") { Value v; v.s = std::move(name); return v; }
  static Value None() { Value v; v.kind = Kind::kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value String(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value MakeList(List items);
  static Value MakeDict(Dict items);
  static Value Namespace(Dict items);
  static Value Function(std::string name) { Value v; v.kind = Kind::kFunction; v.s = std::move(name); return v; }
  static Value FromJson(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  const Value* Find(const std::string& key) const;  // dict/namespace item, or null
};

// Python's truthiness (Undefined is false).
bool Truthy(const Value& v);
// Python's str() and repr().
std::string Str(const Value& v);
std::string Repr(const Value& v);
// Python's float repr (shortest round trip, 1e+16 style past 1e16).
std::string FloatRepr(double x);
// Python's ==.
bool Equal(const Value& a, const Value& b);
// Python's <, for numbers and strings (and lists of them); throws otherwise.
bool Less(const Value& a, const Value& b);
// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...).
// indent < 0: none. Throws for values JSON cannot hold.
std::string ToJson(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                   bool sort_keys);
const char* TypeName(const Value& v);

// UTF-8 string helpers working on code points, as Python's str does.
std::vector<std::string> CodePoints(const std::string& s);

// A template error (raised by raise_exception, or a Python error jinja2 would
// raise). Caught at Render and returned as a status.
struct Error {
  std::string message;
};
[[noreturn]] void Fail(std::string message);

}  // namespace floe::jinja
