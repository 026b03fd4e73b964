// JSON Schema -> grammar: the front end behind OpenAI's `response_format`
// (`json_schema`, `json_object`), vLLM's `guided_json` and forced tool
// calls. The grammar's language is a subset of the documents the schema
// accepts (every document it admits validates), written in one canonical
// layout chosen so a model has few ways to spell a value and none to loop:
//
// - Whitespace (JsonSchemaOptions::whitespace): kFlexible admits 0..N bytes
//   of [ \t\n\r] at each place RFC 8259 allows whitespace inside a value
//   (N = max_whitespace, default 16: pretty printing a few levels deep
//   fits, an endless run of spaces does not); none before or after the
//   root value. kCompact is Python's json.dumps layout (", " and ": ",
//   nothing else); kMinified has no whitespace at all.
// - Properties appear in the order of `properties`; required ones must
//   appear, optional ones may be skipped; undeclared properties (when
//   allowed) come after the declared ones, with keys that differ from every
//   declared name. xgrammar fixes the same order; JSON Schema itself is
//   order-free.
// - `additionalProperties` absent on an object that declares `properties`
//   means none (additional_properties_default, false), like xgrammar's
//   strict_mode; an object schema that declares no properties accepts any
//   properties. The same default closes a `prefixItems` tuple with no
//   `items` (unless minItems needs more items).
// - `strict` (OpenAI's strict mode) additionally requires every object
//   schema to say `"additionalProperties": false` and to list every
//   property in `required`, as OpenAI does (an InvalidArgument naming the
//   object otherwise); such schemas compile the same either way.
// - Strings: any Unicode text, raw UTF-8 or JSON escapes (\" \\ \/ \b \f
//   \n \r \t \uXXXX outside the surrogate range), no raw control bytes.
//   minLength/maxLength count code points. `pattern` (ECMA-262, searched,
//   not anchored, as JSON Schema says) and `format` strings are raw
//   characters without escapes.
// - Numbers: RFC 8259 numbers (no leading zeros, no "+", no "." without
//   digits on both sides, no NaN).
//   `integer` is written without fraction or exponent; bounds on integers
//   are exact (digit-range grammars). A bounded `number` is written without
//   an exponent, with its bounds exact except that a bound needing more
//   than 20 fraction digits is rounded inward at 20 (docs/structured-
//   outputs.md).
// - `oneOf` compiles as `anyOf`: a document that matches two overlapping
//   branches is admitted (xgrammar does the same); discriminated unions,
//   the usual case, do not overlap.
// - A keyword the compiler cannot honour (`not`, `if`, `patternProperties`,
//   `uniqueItems: true`, ...) is an InvalidArgument naming it and its path
//   ("schema.properties.x: keyword 'not' is not supported"), never dropped;
//   annotations (title, description, default, examples, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly, x-*) are ignored.
//
// Pure functions: thread-safe; the result is an independent Grammar.
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"

namespace floe::grammar {

enum class JsonWhitespace {
  kFlexible,  // 0..max_whitespace bytes of [ \t\n\r] wherever JSON allows whitespace
  kCompact,   // {"a": 1, "b": [1, 2]}: ", " between items, ": " after keys
  kMinified,  // {"a":1,"b":[1,2]}
};

// Each limit bounds the compile's time and the grammar's size; a schema past
// one is an InvalidArgument naming the limit, the value and the path.
struct JsonSchemaLimits {
  int max_depth = 64;           // nested subschemas under compilation at once
  int max_properties = 1024;    // declared properties of one object
  int max_enum_values = 4096;   // values of one enum (after merging)
  int max_any_of = 512;         // branches of one anyOf/oneOf
  int max_repeat = 4096;        // a minLength/maxLength/minItems/maxItems bound (O(n) rules)
  int max_rules = 100000;       // rules of the grammar
  int max_work = 1000000;       // schema nodes visited, copied by merges and compiled
};

struct JsonSchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kFlexible;
  int max_whitespace = 16;  // kFlexible only; 0..64
  bool strict = false;
  // What an absent `additionalProperties` means on an object that declares
  // `properties`, and an absent `items` after `prefixItems`.
  bool additional_properties_default = false;
  JsonSchemaLimits limits;
};

// The grammar of the documents `schema` (draft 2020-12, with draft 4-7's
// `definitions`, array `items` and boolean exclusive bounds, and OpenAPI's
// `nullable`) accepts, as described above. Errors are InvalidArgument with
// the schema path; messages are bounded (long keys and values are cut).
absl::StatusOr<Grammar> CompileJsonSchema(const nlohmann::ordered_json& schema,
                                          const JsonSchemaOptions& options = {});

// OpenAI's `json_object`: any JSON object, in the options' whitespace.
Grammar JsonObjectGrammar(const JsonSchemaOptions& options = {});

}  // namespace floe::grammar
