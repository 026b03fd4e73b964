// JSON from a client, parsed with its nesting bounded while it parses.
//
// nlohmann's parser is iterative, but most of what a program then does with
// the tree is not: dump(), copies, comparisons and conversions into other
// trees (the Jinja renderer's values) recurse once per level, so a 200 KB
// body of 100,000 nested arrays parses fine and then overflows the stack.
// ParseUntrustedJson refuses such a document as the parser meets the first
// level past the limit (nlohmann's SAX parser, with a tree builder of our
// own that counts levels), so no level deeper than the limit is ever built,
// and names the field at fault. Use it for every JSON that crosses a trust
// boundary. Wide documents cost linear time, ordered_json's included (whose
// own parse scans an object's keys for each new one: quadratic).
//
// Depth counts containers: the document `[]` or `{}` is depth 1, `[[1]]` is
// 2; scalars add none. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace floe {

// 64 levels hold every real OpenAI request (a tool's JSON Schema takes two
// per nested property, and real ones nest a handful of properties) and keep
// any recursion over the tree shallow.
inline constexpr int kDefaultMaxJsonDepth = 64;

struct JsonLimits {
  int max_depth = kDefaultMaxJsonDepth;  // at least 1
};

// Parses `text` (RFC 8259, nothing after the value but whitespace) into
// Json: nlohmann::ordered_json (keys in the client's order) or
// nlohmann::json. Errors are InvalidArgument:
// - "messages[0].name: JSON nests deeper than 64 levels": the path names the
//   field whose value nests too deep (object keys joined by '.', array
//   indices as [i]; trailing indices dropped, so a deep array in `name` is
//   named `name`; at most 8 steps and 200 bytes, keys cut to 64 bytes). A
//   document deep from its root has an empty path and says "JSON nests...".
// - "not valid JSON (syntax error at byte N)": nothing of the input echoed.
// `error_path`, when given, receives the path of a depth error ("" for a
// syntax error or a root-level depth error), e.g. for OpenAI's `param`.
template <typename Json = nlohmann::ordered_json>
absl::StatusOr<Json> ParseUntrustedJson(std::string_view text, const JsonLimits& limits = {},
                                        std::string* error_path = nullptr);

extern template absl::StatusOr<nlohmann::json> ParseUntrustedJson<nlohmann::json>(std::string_view,
                                                                                 const JsonLimits&, std::string*);
extern template absl::StatusOr<nlohmann::ordered_json> ParseUntrustedJson<nlohmann::ordered_json>(
    std::string_view, const JsonLimits&, std::string*);

}  // namespace floe
