// Python's str methods (split, strip, replace, find, format, isdigit...) with
// CPython's exact semantics over code points, and markupsafe's Markup
// variants for |safe strings (string arguments escaped, Markup returned).
// Private to the builtins; pure, thread-safe.
#pragma once

#include <string>

#include "common/jinja/builtins.h"

namespace floe::jinja {

// self.name(*args) for a string `self`; throws Error as Python raises.
Value CallStrMethod(const Value& self, const std::string& name, const Args& args);

}  // namespace floe::jinja
