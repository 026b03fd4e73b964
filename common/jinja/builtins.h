// What a template can reach on its values: attribute and item access as
// jinja2's ImmutableSandboxedEnvironment does them (x.y tries the attribute,
// then the item; x['y'] the other way round; modifying methods are unsafe),
// the str/dict/list methods templates call, and jinja2's filters and tests
// (with transformers' tojson). Each table is the single list of what the
// subset implements: the parser refuses any other filter or test name, and
// calls to Python methods not implemented, so nothing unimplemented can
// render differently.
// Pure functions over values; thread-safe.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/jinja/value.h"

namespace floe::jinja {

// A call's arguments.
struct Args {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Binds Args to a Python signature, raising Python's TypeErrors for unknown,
// missing-positional-only or surplus arguments.
class Bound {
 public:
  enum Flags { kNone = 0, kPositionalOnly = 1, kVarArgs = 2, kVarKeywords = 4 };
  Bound(const Args& args, const std::string& function, std::initializer_list<const char*> params, int flags = kNone);
  bool has(size_t i) const { return values_[i].has_value(); }
  const Value& get(size_t i, const Value& fallback) const { return values_[i] ? *values_[i] : fallback; }
  // A required parameter.
  const Value& get(size_t i) const;
  const List& varargs() const { return varargs_; }
  const std::vector<std::pair<std::string, Value>>& varkw() const { return varkw_; }

 private:
  std::string function_;
  std::vector<const char*> names_;
  std::vector<std::optional<Value>> values_;
  List varargs_;
  std::vector<std::pair<std::string, Value>> varkw_;
};

// x.name and x[key], as jinja2's sandbox resolves them; a miss is Undefined.
Value GetAttr(const Value& obj, const std::string& name);
Value GetItem(const Value& obj, const Value& key);
// Calls a bound method (a kMethod value from GetAttr).
Value CallMethod(const Value& method, const Args& args);
// A method of Python's str, dict or list that the subset does not implement
// (the parser refuses calls to it; other names may be macros in a namespace).
bool IsUnimplementedMethod(std::string_view name);

using FilterFn = Value (*)(const Value& value, const Args& args);
using TestFn = bool (*)(const Value& value, const Args& args);
// Null when the subset has no such filter/test.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);

// Python str.strip(chars) and friends; chars None/absent means whitespace.
std::string StripChars(const std::string& s, const Value& chars, bool left, bool right);
// jinja2's make_attrgetter: "a.b.0" looked up part by part with GetItem.
Value AttributePath(const Value& item, const Value& path);

}  // namespace floe::jinja
