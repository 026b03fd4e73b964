// Python's string formatting as templates reach it: printf-style
// `"%s: %5.2f" % args` (and jinja2's `format` filter), and str.format() with
// the format mini-language ("{0:>8}", "{name:.2f}", "{:,}"). A specifier
// Python accepts but this subset does not implement (`*` widths, "n", "z",
// zero padding mixed with grouping) is an error, never a different result.
// Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/jinja/value.h"

namespace floe::jinja {

// format % args: args a tuple (positional), a dict (for %(key)s), or one value.
// escape: format is a |safe (Markup) string, which HTML-escapes what %s and
// %r insert (markupsafe's Markup.__mod__).
std::string PercentFormat(const std::string& format, const Value& args, bool escape = false);
// format.format(*positional, **keyword); fields may use .attr and [key].
// escape: Markup.format, which HTML-escapes each field.
std::string StrFormat(const std::string& format, const List& positional,
                      const std::vector<std::pair<std::string, Value>>& keyword, bool escape = false);
// format(v, spec).
std::string FormatSpec(const Value& v, std::string_view spec);
// ascii(v): repr with non-ASCII characters escaped.
std::string AsciiRepr(const Value& v);

}  // namespace floe::jinja
