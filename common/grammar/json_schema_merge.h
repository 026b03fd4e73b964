// Internal to the JSON Schema front end: what the compiler needs besides
// grammar building. Keyword classes (honoured, ignored annotations,
// refused), error paths, local $ref resolution, the work budget, and
// allOf merging: the conjunction of several schemas as one schema, so
// `allOf`, `$ref` with sibling keywords and the keywords beside an
// `anyOf` compile like any other schema.
//
// Merging is exact where JSON Schema lets two schemas fold into one
// (properties and required unioned with each side's additionalProperties
// applied to the other's names, types intersected, bounds tightened, enums
// intersected, subschemas of one name conjoined as allOf for later) and an
// InvalidArgument naming the keyword where it cannot (two different
// patterns, two anyOf lists, two prefixItems tuples).
//
// Not thread-safe (the budget counts); pure otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "common/grammar/json_schema_compiler.h"

namespace floe::grammar::json_schema_internal {

using Json = nlohmann::ordered_json;

enum class KeywordClass {
  kHonoured,    // compiled (some only for certain values: uniqueItems, multipleOf)
  kAnnotation,  // ignored: changes no document's validity
  kRefused,     // known and not supported, or unknown
};
KeywordClass ClassifyKeyword(absl::string_view keyword);

// "schema.properties.x": path plus a key or index, cut so that an error
// message stays short whatever the schema's names.
std::string PathJoin(absl::string_view path, absl::string_view key);
std::string PathIndex(absl::string_view path, size_t index);
// InvalidArgument "<path>: <message>" with the path shortened to 256 bytes.
absl::Status SchemaError(absl::string_view path, absl::string_view message);
// `text` cut to `max` bytes (at a UTF-8 boundary) with "..." when cut.
std::string Clip(absl::string_view text, size_t max = 64);

// Refuses the keywords of `schema` (an object) that are not honoured.
absl::Status CheckKeywords(const Json& schema, absl::string_view path);
// Whether `schema` (an object) has any keyword besides annotations and
// the ones in `besides`.
bool HasAssertions(const Json& schema, const std::vector<absl::string_view>& besides);

// The target of a local reference ("#", "#/$defs/x", "#/definitions/x",
// any JSON pointer into the root, percent- and ~-escaped).
absl::StatusOr<const Json*> ResolveRef(const Json& root, absl::string_view ref, absl::string_view path);

// Counts compile work against JsonSchemaLimits::max_work.
class Budget {
 public:
  explicit Budget(int64_t max) : left_(max), max_(max) {}
  absl::Status Charge(int64_t units, absl::string_view path);

 private:
  int64_t left_;
  int64_t max_;
};

// Bit set of JSON types; kNumber is the non-integral numbers, so the
// schema type "number" is kInteger | kNumber and intersections are ANDs.
enum TypeBits : uint8_t {
  kNull = 1,
  kBoolean = 2,
  kInteger = 4,
  kNumber = 8,
  kString = 16,
  kArray = 32,
  kObject = 64,
  kAllTypes = 127,
};
// The types `schema` states through `type` (and OpenAPI's `nullable`);
// kAllTypes when it states none.
absl::StatusOr<uint8_t> StatedTypes(const Json& schema, absl::string_view path);

// The conjunction of `parts`, each expanded through its $ref and allOf, as
// one schema without $ref or allOf at its top: a JSON object, or `false`
// when the parts contradict (no type in common, disjoint enums).
absl::StatusOr<Json> MergeSchemas(const Json& root, const std::vector<const Json*>& parts, absl::string_view path,
                                  Budget* budget);

}  // namespace floe::grammar::json_schema_internal
