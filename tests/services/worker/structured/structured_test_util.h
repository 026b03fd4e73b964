// Shared by the worker's structured-output tests: the Llama 3.1 vocabulary
// the tiny test model's ids are drawn from, a set of constraints of every
// kind, and what an output spells.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/grammar/vocab.h"
#include "floe/v1/generate.pb.h"
#include "gtest/gtest.h"
#include "tests/common/tokenizer/test_models.h"

namespace floe::structured_testing {

// The real Llama 3.1 vocabulary (128,256 ids, as the tiny model's), built
// once per test binary; null after reporting a failure.
inline std::shared_ptr<const grammar::TokenVocab> Llama3Vocab() {
  static std::shared_ptr<const grammar::TokenVocab>* vocab = [] {
    auto* out = new std::shared_ptr<const grammar::TokenVocab>();
    const Tokenizer* tokenizer = floe::testing::SharedTokenizer("tokenizer-llama3_1");
    if (tokenizer == nullptr) return out;
    auto built = grammar::TokenVocab::FromTokenizer(*tokenizer);
    EXPECT_TRUE(built.ok()) << built.status();
    if (built.ok()) *out = *std::move(built);
    return out;
  }();
  return *vocab;
}

// The bytes `tokens` spell; ids the grammar never allows (EOS, special
// stop ids) spell nothing.
inline std::string Spelled(const grammar::TokenVocab& vocab, const std::vector<int32_t>& tokens) {
  std::string out;
  for (int32_t t : tokens)
    if (vocab.allowed(t)) out += vocab.bytes(t);
  return out;
}

struct NamedConstraint {
  std::string name;
  floe::v1::StructuredOutput output;
};

inline floe::v1::StructuredOutput JsonSchema(const std::string& schema, bool strict = false) {
  floe::v1::StructuredOutput out;
  out.set_json_schema(schema);
  out.set_strict(strict);
  return out;
}
inline floe::v1::StructuredOutput Regex(const std::string& pattern) {
  floe::v1::StructuredOutput out;
  out.set_regex(pattern);
  return out;
}
inline floe::v1::StructuredOutput Choice(const std::vector<std::string>& choices) {
  floe::v1::StructuredOutput out;
  for (const std::string& c : choices) out.mutable_choice()->add_choices(c);
  return out;
}
inline floe::v1::StructuredOutput Gbnf(const std::string& text) {
  floe::v1::StructuredOutput out;
  out.set_grammar(text);
  return out;
}
inline floe::v1::StructuredOutput JsonObject() {
  floe::v1::StructuredOutput out;
  out.set_json_object(true);
  return out;
}

// Small enough to compile against 128k tokens in well under a second each,
// varied enough to need every part of the matcher: keys and enum values
// the grammar forces, bounded strings, integer ranges, arrays, nesting, a
// union, a recursive $ref, alternation, repetition. The regex, choice and
// GBNF languages are finite and short (at most 20 bytes), so any output of
// 20 tokens or more has ended.
inline std::vector<NamedConstraint> Constraints() {
  return {
      {"tool_args", JsonSchema(R"({"type": "object", "properties": {
          "city": {"type": "string", "maxLength": 8},
          "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": false})",
                               /*strict=*/true)},
      {"numbers_and_arrays", JsonSchema(R"({"type": "object", "properties": {
          "n": {"type": "integer", "minimum": -5, "maximum": 120},
          "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
          "note": {"type": ["string", "null"], "maxLength": 4}},
        "required": ["n", "flags"]})")},
      {"union", JsonSchema(R"({"anyOf": [
          {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
           "required": ["kind", "x"]},
          {"type": "array", "items": {"enum": [1, 2, "three"]}, "minItems": 1, "maxItems": 2}]})")},
      {"recursive", JsonSchema(R"({"$defs": {"node": {"type": "object", "properties": {
          "v": {"type": "integer", "minimum": 0, "maximum": 9},
          "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
          "required": ["v", "next"]}}, "$ref": "#/$defs/node"})")},
      {"regex", Regex(R"([a-z]{2,6}-\d{1,3}(\.[a-f]{1,2})?)")},
      {"choice", Choice({"yes", "no", "maybe later", "n/a"})},
      {"gbnf", Gbnf("root ::= \"[\" item (\", \" item){0,3} \"]\"\nitem ::= [a-c]{1,3} | \"nil\"\n")},
  };
}

}  // namespace floe::structured_testing
