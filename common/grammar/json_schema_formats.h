// Internal to the JSON Schema front end: the string `format`s it honours,
// each a regex over raw characters (no escapes: none of these needs a
// character JSON would escape), kept a subset of what ajv-formats' "full"
// mode accepts so every admitted string validates:
//
//   date       RFC 3339 full-date, day checked against the month, Feb 29
//              only in leap years.
//   time       RFC 3339 time with a required offset: HH:MM:SS, 0-9
//              fraction digits, Z/z or +HH:MM; no leap second (:60).
//   date-time  date "T" time (either case of T).
//   email      dot-atoms of RFC 5322's atext, "@", dot-separated LDH
//              labels, the last one 2+ letters; no quoted local parts, no
//              IP-literal domains.
//   uuid       8-4-4-4-12 hex digits, either case; version and variant
//              nibbles not checked (nor does ajv).
//   ipv4       dotted quad, 0-255, no leading zeros.
//   ipv6       RFC 4291 text forms with :: compression; no embedded IPv4
//              tail, no zone.
//   uri        RFC 3986 URI with an authority: scheme "://" reg-name
//              [":" port] path ["?" query] ["#" fragment], percent escapes
//              allowed; no userinfo, no IP-literal hosts.
//
// Thread-safe (constant tables).
#pragma once

#include <optional>
#include <string_view>

namespace floe::grammar::json_schema_internal {

struct StringFormat {
  std::string_view name;
  std::string_view regex;  // ECMA-262, matched in full (regex_compiler.h)
  int min_chars = 0;       // the length range of every match, in code points
  int max_chars = -1;      // -1: unbounded
};

// The format called `name`, or nullopt when it is not honoured.
std::optional<StringFormat> FindStringFormat(std::string_view name);
// "date, time, ..." for error messages.
std::string_view StringFormatNames();

}  // namespace floe::grammar::json_schema_internal
