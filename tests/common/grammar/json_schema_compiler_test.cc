// The JSON Schema front end, keyword by keyword: what each admits and
// refuses (read by the Earley oracle, which shares no code with it), the
// errors that name a refused keyword or a limit with its path, and the
// layout choices (whitespace, property order, canonical numbers). The
// corpus against ajv is json_schema_corpus_test.cc.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/grammar/json_schema_compiler.h"
#include "tests/common/grammar/grammar_oracle.h"

namespace floe::grammar {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using testing::OracleAccepts;

Grammar MustCompile(const std::string& schema, const JsonSchemaOptions& options = {}) {
  absl::StatusOr<Grammar> g = CompileJsonSchema(Json::parse(schema), options);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
  if (!g.ok()) return JsonObjectGrammar();
  EXPECT_TRUE(g->CheckIntegrity().ok()) << g->CheckIntegrity();
  return *std::move(g);
}

std::string ErrorOf(const std::string& schema, const JsonSchemaOptions& options = {}) {
  absl::StatusOr<Grammar> g = CompileJsonSchema(Json::parse(schema), options);
  if (g.ok()) return "compiled";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  return std::string(g.status().message());
}

// Expects exactly the `yes` documents of `candidates` to be accepted.
void ExpectLanguage(const Grammar& g, const std::vector<std::string>& yes, const std::vector<std::string>& no) {
  for (const std::string& d : yes) EXPECT_TRUE(OracleAccepts(g, d)) << "should accept " << d;
  for (const std::string& d : no) EXPECT_FALSE(OracleAccepts(g, d)) << "should reject " << d;
}

TEST(JsonSchemaCompilerTest, RefusedKeywordsAreNamedWithTheirPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"object","properties":{"x":{"not":{"type":"string"}}}})",
       "schema.properties.x: keyword 'not' is not supported"},
      {R"({"if":{"type":"string"},"then":{"minLength":1}})", "schema: keyword 'if' is not supported"},
      {R"({"type":"object","dependentSchemas":{}})", "schema: keyword 'dependentSchemas' is not supported"},
      {R"({"type":"object","dependentRequired":{}})", "schema: keyword 'dependentRequired' is not supported"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "schema: keyword 'patternProperties' is not supported"},
      {R"({"type":"object","propertyNames":{"maxLength":3}})", "schema: keyword 'propertyNames' is not supported"},
      {R"({"type":"array","items":{"contains":{}}})", "schema.items: keyword 'contains' is not supported"},
      {R"({"type":"object","unevaluatedProperties":false})",
       "schema: keyword 'unevaluatedProperties' is not supported"},
      {R"({"anyOf":[{"type":"string"},{"$dynamicRef":"#x"}]})", "schema.anyOf[1]: keyword '$dynamicRef' is not supported"},
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"requried":["x"]}}})", "schema.$ref: keyword 'requried' is not supported"},
      {R"({"type":"array","uniqueItems":true})", "schema: keyword 'uniqueItems' is not supported (only false)"},
      {R"({"type":"integer","multipleOf":3})", "schema.multipleOf: keyword 'multipleOf' is not supported (only 1)"},
      {R"({"type":"object","properties":{"a":{}},"minProperties":1})",
       "schema.minProperties: keyword 'minProperties' is not supported beyond the required properties"},
      {R"({"type":"object","maxProperties":1})",
       "schema.maxProperties: keyword 'maxProperties' is not supported below the declared properties"},
      {R"({"type":"string","format":"hostname"})",
       "schema.format: format 'hostname' is not supported (supported: date, time, date-time, email, uuid, ipv4, "
       "ipv6, uri)"},
      {R"({"type":"string","pattern":"^a","maxLength":3})",
       "schema: 'minLength'/'maxLength' together with 'pattern' are not supported"},
      {R"({"type":"string","enum":["a"],"pattern":"a"})",
       "schema: keyword 'pattern' together with 'enum'/'const' is not supported"},
      {R"({"allOf":[{"type":"string","pattern":"a"},{"pattern":"b"}]})",
       "schema.allOf[1]: allOf: two different 'pattern' values cannot be combined"},
      {R"j({"type":"string","pattern":"(?=a)"})j", "schema.pattern: "},
  };
  for (const auto& [schema, message] : cases) EXPECT_THAT(ErrorOf(schema), HasSubstr(message)) << schema;
}

TEST(JsonSchemaCompilerTest, AnnotationsChangeNothing) {
  const Grammar plain = MustCompile(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
  const Grammar annotated = MustCompile(R"({
    "$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://example.com/s","$comment":"c",
    "title":"T","description":"D","default":{"a":1},"examples":[{"a":2}],"deprecated":false,"x-vendor":1,
    "type":"object","properties":{"a":{"type":"integer","readOnly":true,"writeOnly":false,"example":3}},
    "required":["a"]})");
  EXPECT_EQ(plain.ToGbnf(), annotated.ToGbnf());
}

TEST(JsonSchemaCompilerTest, LimitsAreNamed) {
  std::string deep = R"({"type":"integer"})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_THAT(ErrorOf(deep), HasSubstr("subschemas nest deeper than max_depth = 64"));

  JsonSchemaOptions small;
  small.limits.max_properties = 3;
  small.limits.max_enum_values = 2;
  small.limits.max_any_of = 2;
  EXPECT_THAT(ErrorOf(R"({"properties":{"a":{},"b":{},"c":{},"d":{}}})", small),
              HasSubstr("schema.properties: the property count 4 is over the limit max_properties = 3"));
  EXPECT_THAT(ErrorOf(R"({"enum":[1,2,3]})", small),
              HasSubstr("schema.enum: the value count 3 is over the limit max_enum_values = 2"));
  EXPECT_THAT(ErrorOf(R"({"anyOf":[{},{},{}]})", small),
              HasSubstr("schema.anyOf: the branch count 3 is over the limit max_any_of = 2"));
  EXPECT_THAT(ErrorOf(R"({"type":"string","maxLength":5000})"),
              HasSubstr("schema.maxLength: 5000 is over the limit max_repeat = 4096"));
  EXPECT_THAT(ErrorOf(R"({"type":"array","minItems":4097})"),
              HasSubstr("schema.minItems: 4097 is over the limit max_repeat = 4096"));
  JsonSchemaOptions few_rules;
  few_rules.limits.max_rules = 10;
  EXPECT_THAT(ErrorOf(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"number"}}})", few_rules),
              HasSubstr("more than max_rules = 10 rules"));
  JsonSchemaOptions little_work;
  little_work.limits.max_work = 3;
  EXPECT_THAT(ErrorOf(R"({"properties":{"a":{},"b":{},"c":{}}})", little_work), HasSubstr("max_work = 3"));
  JsonSchemaOptions spaces;
  spaces.max_whitespace = 65;
  EXPECT_THAT(ErrorOf("{}", spaces), HasSubstr("max_whitespace 65 is outside 0..64"));
  // Paths are cut, however long the names.
  const std::string long_name(5000, 'k');
  const std::string message = ErrorOf(R"({"properties":{")" + long_name + R"(":{"not":{}}}})");
  EXPECT_LT(message.size(), 200u) << message;
  EXPECT_THAT(message, HasSubstr("keyword 'not' is not supported"));
}

TEST(JsonSchemaCompilerTest, IntegerRangesAreExact) {
  struct Range {
    std::string schema;
    long lo, hi;  // inclusive; +-1000000 for "unbounded" within the probe window
  };
  const std::vector<Range> ranges = {
      {R"({"type":"integer","minimum":0,"maximum":100})", 0, 100},
      {R"({"type":"integer","exclusiveMinimum":-274,"exclusiveMaximum":1000})", -273, 999},
      {R"({"type":"integer","minimum":-100,"maximum":-5})", -100, -5},
      {R"({"type":"integer","minimum":37,"maximum":1234})", 37, 1234},
      {R"({"type":"integer","minimum":1})", 1, 1000000},
      {R"({"type":"integer","maximum":7})", -1000000, 7},
      {R"({"type":"integer","exclusiveMaximum":-10})", -1000000, -11},
      {R"({"type":"integer","minimum":0.5,"maximum":9.5})", 1, 9},
      {R"({"type":"integer","minimum":-1000,"maximum":-999})", -1000, -999},
      {R"({"type":"integer","minimum":10,"maximum":10})", 10, 10},
      {R"({"type":"integer","minimum":5,"exclusiveMinimum":true})", 6, 1000000},  // draft 4
      {R"({"type":"integer","format":"int32","minimum":-3,"maximum":3000000000})", -3, 1000000},
      {R"({"type":"number","multipleOf":1,"minimum":-2,"maximum":2})", -2, 2},
  };
  for (const Range& r : ranges) {
    SCOPED_TRACE(r.schema);
    const Grammar g = MustCompile(r.schema);
    for (long n = -1300; n <= 1300; ++n)
      ASSERT_EQ(OracleAccepts(g, std::to_string(n)), n >= r.lo && n <= r.hi) << n;
    ExpectLanguage(g, {}, {"007", "1.0", "1e2", "+1", "", "-"});
  }
  ExpectLanguage(MustCompile(R"({"type":"integer","minimum":9007199254740993})"),
                 {"9007199254740993", "123456789012345678901234567890"}, {"9007199254740992", "-1"});
  ExpectLanguage(MustCompile(R"({"type":"integer","format":"int32"})"), {"2147483647", "-2147483648"},
                 {"2147483648", "-2147483649"});
  EXPECT_THAT(ErrorOf(R"({"type":"integer","minimum":5,"maximum":3})"), HasSubstr("schema: the schema admits no value"));
}

TEST(JsonSchemaCompilerTest, NumberBoundsAreExact) {
  const Grammar unit = MustCompile(R"({"type":"number","minimum":0.05,"maximum":0.95})");
  for (int k = -100; k <= 1100; ++k) {
    char text[32];
    std::snprintf(text, sizeof(text), "%s%d.%03d", k < 0 ? "-" : "", std::abs(k) / 1000, std::abs(k) % 1000);
    ASSERT_EQ(OracleAccepts(unit, text), k >= 50 && k <= 950) << text;
  }
  ExpectLanguage(unit, {"0.05", "0.0500000", "0.9499999999", "0.5", "0.95"}, {"0.95000001", "1", "0", ".5", "5e-1"});
  ExpectLanguage(MustCompile(R"({"type":"number","exclusiveMinimum":0})"),
                 {"0.00000000000000000001", "5", "0.5", "123456789.125"},
                 {"0", "0.0", "-1", "-0.5", "1e5",
                  "0.000000000000000000001"});  // past 20 fraction digits: rounded inward (documented)
  ExpectLanguage(MustCompile(R"({"type":"number","minimum":-430.5,"maximum":8848.86})"),
                 {"-430.5", "-430.50", "8848.86", "8848.859999", "-0", "0.5", "-0.0", "17"},
                 {"-430.51", "8848.861", "8849", "-431"});
  ExpectLanguage(MustCompile(R"({"type":"number","minimum":1.25,"exclusiveMaximum":1.5})"),
                 {"1.25", "1.4999999", "1.3"}, {"1.5", "1.50", "1.2499", "2"});
  ExpectLanguage(MustCompile(R"({"type":"number"})"),
                 {"0", "-0", "1.5", "-2.5e-3", "1E+10", "12345678901234567890"}, {"01", "1.", ".5", "+1", "1e", "NaN"});
}

TEST(JsonSchemaCompilerTest, StringsCountCodePointsAndUseJsonEscapes) {
  ExpectLanguage(MustCompile(R"({"type":"string","minLength":2,"maxLength":3})"),
                 {"\"é中\"", R"("\n\t")", R"("\u00e9ab")", "\"🚀🚀🚀\"", R"("a\"")"},
                 {"\"a\"", "\"abcd\"", "\"🚀🚀🚀🚀\""});
  ExpectLanguage(MustCompile(R"({"type":"string"})"),
                 {R"("")", R"("\/\\\"\b\f\n\r\t")", R"("\u0000\uFFFF\uE000")", "\"\x7f\""},
                 {"\"a\nb\"", R"("\uD800")", R"("\ud83d\ude00")", R"("\x")", R"("\u12")", "\"\xff\"", "\"\xc0\xaf\"",
                  "\"\xed\xa0\x80\"", "'a'"});
}

TEST(JsonSchemaCompilerTest, PropertiesFollowSchemaOrder) {
  const Grammar g = MustCompile(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
          "required":["a","c"],"additionalProperties":false})");
  ExpectLanguage(g, {R"({"a":1,"c":3})", R"({"a":1,"b":2,"c":3})"},
                 {R"({"c":3,"a":1})", R"({"a":1,"c":3,"b":2})", R"({"a":1})", "{}", R"({"a":1,"a":1,"c":3})"});
  ExpectLanguage(MustCompile(R"({"properties":{"a":{},"b":{}}})"), {"{}", R"({"b":2})", R"({"a":[],"b":{}})"},
                 {R"({"b":2,"a":1})", "[]"});
}

TEST(JsonSchemaCompilerTest, UndeclaredProperties) {
  // Absent additionalProperties: none past the declared ones (option:
  // any); an object schema declaring no properties takes any.
  const std::string declared = R"({"type":"object","properties":{"name":{"type":"string"}}})";
  ExpectLanguage(MustCompile(declared), {R"({"name":"x"})"}, {R"({"name":"x","y":1})"});
  JsonSchemaOptions open;
  open.additional_properties_default = true;
  ExpectLanguage(MustCompile(declared, open), {R"({"name":"x","y":1})", R"({"y":1})"}, {});
  ExpectLanguage(MustCompile(R"({"type":"object"})"), {"{}", R"({"any":[1,{"b":null}],"c":"d"})"}, {"[]"});
  // Extra keys never repeat a declared name, however spelled.
  const Grammar g = MustCompile(R"({"type":"object","properties":{"name":{"type":"string"},"a/b":{}},
                                     "additionalProperties":{"type":"integer"}})");
  ExpectLanguage(g, {R"({"name":"x","nam":1})", R"({"name":"x","names":1})", R"({"nom":1})", R"({"":1})",
                     R"({"a/bc":1})", R"({"nom\u0061":1})", R"({"\/a":1})"},
                 {R"({"name":"x","name":1})", R"({"n\u0061me":1})", R"({"a\/b":1})", R"({"name":1})",
                  R"({"x":"s"})",
                  // Until a key differs from every name, no escape that could
                  // spell a name's next character (a subset, never a duplicate).
                  R"({"n\u0061mes":1})", R"({"a\/c":1})"});
  // A required name that only additionalProperties admits.
  ExpectLanguage(MustCompile(R"({"type":"object","required":["id"],"additionalProperties":{"type":"integer"}})"),
                 {R"({"id":1})", R"({"id":1,"x":2})"}, {"{}", R"({"x":2,"id":1})"});
  EXPECT_THAT(ErrorOf(R"({"type":"object","required":["id"],"properties":{"a":{}},"additionalProperties":false})"),
              HasSubstr("the schema admits no value"));
  // Absent additionalProperties admits a required undeclared name (any
  // value), though the grammar writes no other undeclared name.
  ExpectLanguage(MustCompile(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["b"]})"),
                 {R"({"b":null})", R"({"a":1,"b":[2]})"}, {R"({"a":1})", R"({"b":1,"c":2})"});
}

TEST(JsonSchemaCompilerTest, WhitespacePolicies) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array"}},
                                 "required":["a","b"]})";
  const Grammar flexible = MustCompile(schema);
  ExpectLanguage(flexible,
                 {R"({"a":1,"b":[]})", "{\n  \"a\" : 1 ,\n\t\"b\": [ 1 ,2 ]\r\n}", "{" + std::string(16, ' ') + "\"a\":1,\"b\":[]}"},
                 {"{" + std::string(17, ' ') + "\"a\":1,\"b\":[]}", R"( {"a":1,"b":[]})", R"({"a":1,"b":[]} )",
                  "{\"a\":1,\"b\":[]}\n", "{\"a\"\f:1,\"b\":[]}"});
  JsonSchemaOptions compact;
  compact.whitespace = JsonWhitespace::kCompact;
  ExpectLanguage(MustCompile(schema, compact), {R"({"a": 1, "b": [1, {"x": null}]})", R"({"a": 1, "b": []})"},
                 {R"({"a":1,"b":[]})", R"({"a": 1,"b": []})", R"({ "a": 1, "b": [] })"});
  JsonSchemaOptions minified;
  minified.whitespace = JsonWhitespace::kMinified;
  ExpectLanguage(MustCompile(schema, minified), {R"({"a":1,"b":[1,{"x":null}]})"}, {R"({"a": 1,"b":[]})"});
  JsonSchemaOptions none;
  none.max_whitespace = 0;
  ExpectLanguage(MustCompile(schema, none), {R"({"a":1,"b":[]})"}, {R"({"a": 1,"b":[]})"});
}

TEST(JsonSchemaCompilerTest, StrictModeFollowsOpenAi) {
  JsonSchemaOptions strict;
  strict.strict = true;
  EXPECT_THAT(ErrorOf(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})", strict),
              HasSubstr("schema: strict mode requires \"additionalProperties\": false"));
  EXPECT_THAT(ErrorOf(R"({"type":"object","properties":{"o":{"type":"object","properties":{"a":{},"b":{}},
                          "required":["a"],"additionalProperties":false}},"required":["o"],"additionalProperties":false})",
                      strict),
              HasSubstr("schema.properties.o: strict mode requires every property in 'required' (missing 'b')"));
  ExpectLanguage(MustCompile(R"({"type":"object","properties":{"a":{"type":["string","null"]}},"required":["a"],
                                 "additionalProperties":false})",
                             strict),
                 {R"({"a":null})", R"({"a":"x"})"}, {"{}"});
}

TEST(JsonSchemaCompilerTest, RecursionAndSchemasWithoutFiniteDocuments) {
  const Grammar tree = MustCompile(R"({"$ref":"#/$defs/t","$defs":{"t":{"type":"object",
      "properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},
      "required":["v"],"additionalProperties":false}}})");
  ExpectLanguage(tree, {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4}]})"},
                 {R"({"v":1,"kids":[{}]})"});
  ExpectLanguage(MustCompile(R"({"type":"object","properties":{"self":{"$ref":"#"}},"additionalProperties":false})"),
                 {"{}", R"({"self":{"self":{}}})"}, {R"({"self":1})"});
  EXPECT_THAT(ErrorOf(R"({"$ref":"#/$defs/a","$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},
                          "required":["x"]}}})"),
              HasSubstr("the schema admits no finite document"));
  EXPECT_THAT(ErrorOf(R"({"$ref":"#"})"), HasSubstr("the schema admits no finite document"));
  EXPECT_THAT(ErrorOf(R"({"$ref":"#/$defs/a","$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}}})"),
              HasSubstr("nest more than 32 levels deep (a reference cycle?)"));
  // Left recursion through anyOf cannot be parsed left to right.
  EXPECT_THAT(ErrorOf(R"({"$ref":"#/$defs/a","$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}}})"),
              HasSubstr("recurses before writing anything"));
}

TEST(JsonSchemaCompilerTest, References) {
  ExpectLanguage(MustCompile(R"({"$defs":{"a/b":{"type":"integer"},"c%d":{"type":"boolean"},"t~":{"const":"t"}},
                                 "type":"array","prefixItems":[{"$ref":"#/$defs/a~1b"},{"$ref":"#/$defs/c%25d"},
                                 {"$ref":"#/$defs/t~0"},{"$ref":"#/prefixItems/0"}]})"),
                 {R"([1,true,"t",2])", R"([1])"}, {R"([true])", R"([1,true,"t",2,3])"});
  EXPECT_THAT(ErrorOf(R"({"$ref":"other.json#/a"})"),
              HasSubstr("schema: $ref 'other.json#/a' is not supported: only local references ('#...') are"));
  EXPECT_THAT(ErrorOf(R"({"$ref":"#anchor"})"), HasSubstr("anchors are not, JSON pointers are"));
  EXPECT_THAT(ErrorOf(R"({"type":"object","properties":{"x":{"$ref":"#/$defs/missing"}}})"),
              HasSubstr("schema.properties.x: $ref '#/$defs/missing' does not resolve"));
  EXPECT_THAT(ErrorOf(R"({"$ref":"#/%zz"})"), HasSubstr("bad percent escape"));
}

TEST(JsonSchemaCompilerTest, AllOfMerges) {
  ExpectLanguage(MustCompile(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                                          {"properties":{"b":{"type":"string"},"a":{"minimum":5}},"required":["b"]}]})"),
                 {R"({"a":5,"b":"x"})"}, {R"({"a":4,"b":"x"})", R"({"a":5})", R"({"b":"x"})"});
  // One part's additionalProperties: false forbids the other part's names.
  EXPECT_THAT(ErrorOf(R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},
                                    {"properties":{"b":{}},"required":["b"]}]})"),
              HasSubstr("the schema admits no value"));
  ExpectLanguage(MustCompile(R"({"allOf":[{"type":["integer","string"]},{"type":["string","null"]}]})"),
                 {R"("s")"}, {"1", "null"});
  ExpectLanguage(MustCompile(R"({"allOf":[{"type":"number","minimum":0},{"type":"integer","minimum":5,"maximum":9}]})"),
                 {"5", "9"}, {"4", "5.5", "10"});
  ExpectLanguage(MustCompile(R"({"allOf":[{"enum":["a","b","c"]},{"enum":["c","b","d"]}]})"), {R"("b")", R"("c")"},
                 {R"("a")", R"("d")"});
  EXPECT_THAT(ErrorOf(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"), HasSubstr("admits no value"));
}

TEST(JsonSchemaCompilerTest, KeywordsBesideAnyOfApplyToEachBranch) {
  const Grammar g = MustCompile(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
      "anyOf":[{"required":["a"]},{"required":["b"]}],"additionalProperties":false})");
  ExpectLanguage(g, {R"({"a":1})", R"({"b":1})", R"({"a":1,"b":2})"}, {"{}", R"({"c":1})"});
  ExpectLanguage(MustCompile(R"({"type":"string","oneOf":[{"maxLength":1},{"pattern":"^x+$"}]})"),
                 {R"("a")", R"("xxx")", R"("")"}, {R"("ab")", "1"});
}

TEST(JsonSchemaCompilerTest, EnumAndConst) {
  ExpectLanguage(MustCompile(R"({"type":"string","enum":["a",1,"b",null]})"), {R"("a")", R"("b")"}, {"1", "null"});
  ExpectLanguage(MustCompile(R"({"enum":["red","rose","rosewood",1.5,1e100,true,null]})"),
                 {R"("rose")", R"("rosewood")", "1.5", "1e+100", "true", "null"}, {R"("ros")", "1e100", "false"});
  JsonSchemaOptions compact;
  compact.whitespace = JsonWhitespace::kCompact;
  ExpectLanguage(MustCompile(R"({"const":{"a":[1,2],"b":"é"}})", compact), {R"({"a": [1, 2], "b": "é"})"},
                 {R"({"a":[1,2],"b":"é"})", R"({"b": "é", "a": [1, 2]})"});
  ExpectLanguage(MustCompile(R"({"type":"string","minLength":2,"enum":["a","ab","abc"]})"), {R"("ab")", R"("abc")"},
                 {R"("a")"});
  EXPECT_THAT(ErrorOf(R"({"type":"integer","enum":["a"]})"), HasSubstr("admits no value"));
  EXPECT_THAT(ErrorOf(R"({"const":"x","enum":["y"]})"), HasSubstr("admits no value"));
}

TEST(JsonSchemaCompilerTest, Formats) {
  struct Case {
    std::string format;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {"date", {"2024-02-29", "2000-02-29", "1999-12-31", "0000-02-29"},
       {"2023-02-29", "1900-02-29", "2024-04-31", "2024-13-01", "2024-00-10", "24-01-01", "2024-1-01"}},
      {"time", {"23:59:59Z", "00:00:00z", "12:30:15.123+05:30", "08:00:00-12:00"},
       {"24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00Z", "12:00:00+5:00", "12:00:00.Z"}},
      {"date-time", {"2025-01-31T23:59:59.5Z", "2024-02-29t00:00:00+00:00"},
       {"2025-01-31 23:59:59Z", "2025-01-32T00:00:00Z", "2025-01-31T23:59:59"}},
      {"email", {"a@b.co", "first.last+tag@sub.example.org", "x_y!#$%&'*/=?^`{|}~@a-b.cd"},
       {"a@b", "@b.co", "a..b@c.de", "a@-b.cd", "a@b.c", "a b@c.de", "a@b_c.de"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000", "ABCDEF00-0000-0000-0000-000000000000"},
       {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"}},
      {"ipv4", {"0.0.0.0", "255.255.255.255", "192.168.1.10"}, {"256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.4.5"}},
      {"ipv6", {"::", "::1", "fe80::1", "1:2:3:4:5:6:7:8", "2001:db8::ff00:42:8329", "1::", "1:2:3:4:5:6:7::"},
       {"1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1", "g::"}},
      {"uri", {"https://example.com", "http://a.b:8080/p/a/t/h?q=1&r=%20#frag", "file:///etc/hosts", "urn-x://y"},
       {"example.com", "/relative", "https://exa mple.com", "https://a.b/%zz", "1http://x"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.format);
    const Grammar g = MustCompile(R"({"type":"string","format":")" + c.format + "\"}");
    for (const std::string& s : c.yes) EXPECT_TRUE(OracleAccepts(g, "\"" + s + "\"")) << s;
    for (const std::string& s : c.no) EXPECT_FALSE(OracleAccepts(g, "\"" + s + "\"")) << s;
  }
  // Lengths beside a format are honoured when the format already meets them.
  MustCompile(R"({"type":"string","format":"date","minLength":10,"maxLength":10})");
  EXPECT_THAT(ErrorOf(R"({"type":"string","format":"email","maxLength":254})"),
              HasSubstr("'minLength'/'maxLength' together with format 'email' are not supported"));
  // A string format on a number constrains nothing; an OpenAPI one on a string neither.
  ExpectLanguage(MustCompile(R"({"type":"number","format":"date"})"), {"1.5"}, {});
  ExpectLanguage(MustCompile(R"({"type":"string","format":"int64"})"), {R"("x")"}, {});
}

TEST(JsonSchemaCompilerTest, PatternsSearchAndNeverNeedEscapes) {
  ExpectLanguage(MustCompile(R"({"type":"string","pattern":"[0-9]"})"), {R"("abc1def")", R"("7")"}, {R"("abc")"});
  ExpectLanguage(MustCompile(R"({"type":"string","pattern":"^ab"})"), {R"("ab")", R"("abc")"}, {R"("cab")"});
  ExpectLanguage(MustCompile(R"({"type":"string","pattern":"c$"})"), {R"("abc")"}, {R"("cab")"});
  // Raw characters only: no escape sequence, so no quote inside.
  ExpectLanguage(MustCompile(R"({"type":"string","pattern":"^.*$"})"), {R"("a'b")", R"("é")"},
                 {R"("a\"b")", R"("a\nb")"});
}

TEST(JsonSchemaCompilerTest, Arrays) {
  const std::string tuple = R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}]})";
  ExpectLanguage(MustCompile(tuple), {"[]", "[1]", R"([1,"a"])"}, {R"([1,"a",2])", R"(["a"])"});
  JsonSchemaOptions open;
  open.additional_properties_default = true;
  ExpectLanguage(MustCompile(tuple, open), {R"([1,"a",2,{}])"}, {});
  ExpectLanguage(MustCompile(R"({"type":"array","prefixItems":[{"type":"integer"}],"minItems":3})"),
                 {R"([1,null,"x"])"}, {"[1]", "[1,2]"});
  ExpectLanguage(MustCompile(R"({"type":"array","prefixItems":[{"type":"integer"},false,{}]})"), {"[]", "[1]"},
                 {"[1,2]"});
  ExpectLanguage(MustCompile(R"({"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":3})"),
                 {"[true,false]", "[true,true,true]"}, {"[true]", "[true,true,true,true]", "[1,2]"});
  ExpectLanguage(MustCompile(R"({"type":"array","items":false})"), {"[]"}, {"[1]"});
}

TEST(JsonSchemaCompilerTest, TypesInferredFromKeywords) {
  ExpectLanguage(MustCompile(R"({"properties":{"a":{"type":"string"}}})"), {"{}", R"({"a":"x"})"}, {R"("x")", "1"});
  ExpectLanguage(MustCompile(R"({"minimum":3})"), {"3", "3.5"}, {"2", R"("x")"});
  ExpectLanguage(MustCompile("{}"), {"1", "null", R"({"a":[true]})"}, {""});
  ExpectLanguage(MustCompile("true"), {"[]"}, {});
  EXPECT_THAT(ErrorOf("false"), HasSubstr("schema: the schema admits no value"));
  EXPECT_THAT(ErrorOf("3"), HasSubstr("schema: a schema must be an object or a boolean"));
  EXPECT_THAT(ErrorOf(R"({"type":"strings"})"), HasSubstr("schema.type: unknown type 'strings'"));
}

TEST(JsonSchemaCompilerTest, JsonObjectAcceptsAnyObject) {
  const Grammar g = JsonObjectGrammar();
  ASSERT_TRUE(g.CheckIntegrity().ok()) << g.CheckIntegrity();
  ExpectLanguage(g, {"{}", R"({"a":[1,{"b":null}],"a":2})", "{ \"x\" : \"y\" }"}, {"[]", "1", R"({"a"})", "{} "});
  JsonSchemaOptions compact;
  compact.whitespace = JsonWhitespace::kCompact;
  ExpectLanguage(JsonObjectGrammar(compact), {R"({"a": 1, "b": {}})"}, {R"({"a":1})"});
}

}  // namespace
}  // namespace floe::grammar
