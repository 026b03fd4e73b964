// Internal to the JSON Schema front end: the compiler's state, shared by
// its two translation units. json_schema_compiler.cc walks the schema
// (limits, $ref, allOf, anyOf/oneOf, type dispatch) and finishes the
// grammar; json_schema_types.cc compiles one type's keywords (enum/const,
// numbers, strings, arrays, objects).
//
// One compile per object; not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_number_grammar.h"
#include "common/grammar/json_schema_compiler.h"
#include "common/grammar/json_schema_merge.h"
#include "common/grammar/json_syntax.h"

namespace floe::grammar::json_schema_internal {

// A compiled subschema: the element matching its documents, or nullopt when
// it admits none (`false`, contradictory keywords, an empty range).
using Compiled = std::optional<Element>;

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options);

  absl::StatusOr<Grammar> Run();

  // The final pass (JsonObjectGrammar's too): keeps only the rules the root
  // reaches through alternatives that can finish (a recursive schema whose
  // every branch recurses would otherwise let a model wander into a
  // document that never ends), then checks the IR's restrictions.
  static absl::StatusOr<Grammar> Finish(const Grammar& g);

 private:
  // json_schema_compiler.cc
  absl::StatusOr<Compiled> Compile(const Json& s, const std::string& path, int depth);
  absl::StatusOr<Compiled> CompileRef(const Json& ref, const std::string& path, int depth);
  absl::StatusOr<Compiled> CompileUnion(const Json& s, const std::string& path, int depth);
  // Merged schemas live as long as the compile (their subschemas are
  // compiled by reference).
  const Json& Keep(Json merged) { return arena_.emplace_back(std::move(merged)); }
  absl::Status CheckRules(absl::string_view path) const;
  absl::Status CheckCount(absl::string_view path, absl::string_view what, size_t n, int limit,
                          absl::string_view limit_name) const;

  // json_schema_types.cc
  absl::StatusOr<Compiled> CompileEnum(const Json& s, const std::string& path);
  absl::StatusOr<Compiled> CompileNumber(const Json& s, const std::string& path, bool integer);
  absl::StatusOr<Compiled> CompileString(const Json& s, const std::string& path);
  absl::StatusOr<Compiled> CompileArray(const Json& s, const std::string& path, int depth);
  absl::StatusOr<Compiled> CompileObject(const Json& s, const std::string& path, int depth);
  // A non-negative integer keyword (minLength, maxItems, ...) no larger
  // than max_repeat; `fallback` when absent.
  absl::StatusOr<int> Count(const Json& s, const char* key, const std::string& path, int fallback) const;
  // Whether an enum/const value meets the schema's other keywords.
  absl::StatusOr<bool> EnumValueFits(const Json& s, const Json& value, const std::string& path) const;
  // The tightest lower (or upper) bound of the schema's minimum/maximum
  // keywords, inward-rounded to what the grammar writes.
  absl::StatusOr<std::optional<Decimal>> Bound(const Json& s, bool lower, bool integer,
                                               const std::string& path) const;

  const Json& root_;
  const JsonSchemaOptions& options_;
  Grammar g_;
  JsonSyntax syntax_;
  Budget budget_;
  absl::flat_hash_map<std::string, uint32_t> ref_rules_;  // $ref text -> its rule
  std::deque<Json> arena_;
};

}  // namespace floe::grammar::json_schema_internal
