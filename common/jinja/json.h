// json.dumps, as transformers' `tojson` filter calls it:
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys). Python's layout rules (separators default to ", "
// and ": ", or "," and ": " once indenting), float repr, NaN/Infinity and
// \uXXXX escapes, byte for byte. Pure; thread-safe.
#pragma once

#include <string>

#include "common/jinja/value.h"

namespace floe::jinja {

struct JsonOptions {
  bool ensure_ascii = false;
  bool indented = false;     // indent was not None
  std::string indent;        // the indent unit (indent=2 is "  ", a string is itself)
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Throws TypeError's Error for what JSON cannot hold (Undefined, a namespace,
// a generator, a dict view...), as json.dumps does.
std::string JsonDumps(const Value& v, const JsonOptions& options);

}  // namespace floe::jinja
