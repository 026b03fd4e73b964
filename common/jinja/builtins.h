// Python's string methods, jinja2's filters and tests, over Values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/jinja/value.h"

namespace floe::jinja {

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`, else `fallback`.
  Value Get(size_t index, const std::string& name, Value fallback = Value::Undefined()) const;
};

// Python's str.strip family (chars: Undefined/None = whitespace).
std::string Strip(const std::string& s, const Value& chars, bool left, bool right);
// obj.name(args) for str, dict and list methods; throws if none applies.
Value CallMethod(const Value& obj, const std::string& name, const Args& args);
// Iterating a value as a for loop or list() does.
std::vector<Value> Iterate(const Value& v);

class Renderer;
// value | name(args). `apply_test`/`apply_filter` let map/select call back.
Value ApplyFilter(Renderer& renderer, const std::string& name, const Value& value, const Args& args);
bool ApplyTest(const std::string& name, const Value& value, const Args& args);

}  // namespace floe::jinja
