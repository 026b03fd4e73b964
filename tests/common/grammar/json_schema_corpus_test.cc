// The JSON Schema front end against an independent validator, over the
// corpus in schemas/ (realistic tool-argument and API schemas, recursive
// ones, unions, formats, bounds): documents sampled at random from each
// compiled grammar must validate with ajv + ajv-formats
// (json_schema_ajv_test.mjs), and each file's hand-picked documents must be
// accepted (valid) or rejected (invalid, and valid-but-outside-policy: the
// fixed property order, no undeclared properties) by the grammar, as the
// Earley oracle reads it.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/grammar/json_schema_compiler.h"
#include "tests/common/grammar/grammar_oracle.h"
#include "tests/common/grammar/grammar_sampler.h"

namespace floe::grammar {
namespace {

using Json = nlohmann::ordered_json;
using testing::GrammarSampler;
using testing::OracleAccepts;

std::string SourceDir() {
  const char* dir = std::getenv("FLOE_SOURCE_DIR");
  return dir ? dir : ".";
}

struct SchemaFile {
  std::string name;
  Json content;
};

std::vector<SchemaFile> LoadCorpus() {
  std::vector<SchemaFile> files;
  const std::filesystem::path dir = std::filesystem::path(SourceDir()) / "tests/common/grammar/schemas";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    files.push_back({entry.path().filename().string(), Json::parse(in)});
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return files;
}

// A document in the kCompact layout (Python's json.dumps): ", " and ": ".
std::string Compact(const Json& v) {
  if (!v.is_structured()) return v.dump();
  std::string out(1, v.is_object() ? '{' : '[');
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    if (v.is_object()) out += Json(it.key()).dump() + ": ";
    out += Compact(it.value());
  }
  return out + (v.is_object() ? '}' : ']');
}

int Depth(const Json& v) {
  int d = 0;
  if (v.is_structured())
    for (const Json& c : v) d = std::max(d, Depth(c));
  return d + (v.is_structured() ? 1 : 0);
}

JsonSchemaOptions WithWhitespace(JsonWhitespace ws) {
  JsonSchemaOptions o;
  o.whitespace = ws;
  return o;
}

TEST(JsonSchemaCorpusTest, HasThirtyRealisticSchemas) {
  const std::vector<SchemaFile> corpus = LoadCorpus();
  EXPECT_GE(corpus.size(), 30u);
  for (const SchemaFile& f : corpus) {
    EXPECT_TRUE(f.content.contains("schema") && f.content.contains("valid") && f.content.contains("invalid")) << f.name;
    EXPECT_FALSE(f.content["valid"].empty()) << f.name;
    EXPECT_FALSE(f.content["invalid"].empty()) << f.name;
  }
}

TEST(JsonSchemaCorpusTest, HandPickedDocumentsAcceptedAndRejected) {
  for (const SchemaFile& f : LoadCorpus()) {
    SCOPED_TRACE(f.name);
    absl::StatusOr<Grammar> flexible = CompileJsonSchema(f.content["schema"]);
    ASSERT_TRUE(flexible.ok()) << flexible.status();
    ASSERT_TRUE(flexible->CheckIntegrity().ok()) << flexible->CheckIntegrity();
    absl::StatusOr<Grammar> compact = CompileJsonSchema(f.content["schema"], WithWhitespace(JsonWhitespace::kCompact));
    ASSERT_TRUE(compact.ok()) << compact.status();
    if (f.content.value("strict", false)) {
      JsonSchemaOptions strict;
      strict.strict = true;
      absl::StatusOr<Grammar> g = CompileJsonSchema(f.content["schema"], strict);
      EXPECT_TRUE(g.ok()) << "strict mode: " << g.status();
    }
    for (const Json& doc : f.content["valid"]) {
      EXPECT_TRUE(OracleAccepts(*flexible, doc.dump())) << "valid, minified: " << doc.dump();
      if (Depth(doc) <= 7) EXPECT_TRUE(OracleAccepts(*flexible, doc.dump(2))) << "valid, indented: " << doc.dump(2);
      EXPECT_TRUE(OracleAccepts(*compact, Compact(doc))) << "valid, compact: " << Compact(doc);
    }
    for (const char* list : {"invalid", "policy_rejected"}) {
      if (!f.content.contains(list)) continue;
      for (const Json& doc : f.content[list]) {
        EXPECT_FALSE(OracleAccepts(*flexible, doc.dump())) << list << ": " << doc.dump();
        EXPECT_FALSE(OracleAccepts(*compact, Compact(doc))) << list << ": " << Compact(doc);
      }
    }
  }
}

// Runs the ajv script on `cases`; returns its exit status and output.
std::pair<int, std::string> RunAjv(const Json& cases) {
  const std::string file = ::testing::TempDir() + "/json_schema_ajv_cases.json";
  {
    std::ofstream out(file);
    out << cases.dump();
  }
  const std::string command = "node '" + SourceDir() + "/tests/common/grammar/json_schema_ajv_test.mjs' '" + file +
                              "' 2>&1";
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST(JsonSchemaCorpusTest, SampledDocumentsValidateWithAjv) {
  Json cases = Json::array();
  size_t sampled = 0;
  for (const SchemaFile& f : LoadCorpus()) {
    SCOPED_TRACE(f.name);
    Json accept = Json::array();
    Json reject = Json::array();
    std::mt19937_64 rng(std::hash<std::string>()(f.name));
    for (const auto& [ws, count] : {std::pair{JsonWhitespace::kFlexible, 40}, std::pair{JsonWhitespace::kCompact, 10},
                                    std::pair{JsonWhitespace::kMinified, 10}}) {
      absl::StatusOr<Grammar> g = CompileJsonSchema(f.content["schema"], WithWhitespace(ws));
      ASSERT_TRUE(g.ok()) << g.status();
      const GrammarSampler sampler(*g);
      for (int i = 0; i < count; ++i) {
        const std::optional<std::string> doc = sampler.Sample(rng, 60, 3000);
        ASSERT_TRUE(doc.has_value());
        // Whether it is JSON is the ajv script's first check (JSON.parse:
        // nlohmann refuses numbers past the double range, RFC 8259 does not).
        // The sampler and the oracle agree (spot check: the oracle is slow).
        if (i < 2) EXPECT_TRUE(OracleAccepts(*g, *doc)) << *doc;
        accept.push_back(*doc);
        ++sampled;
      }
    }
    for (const Json& doc : f.content["valid"]) accept.push_back(doc.dump());
    if (f.content.contains("policy_rejected"))
      for (const Json& doc : f.content["policy_rejected"]) accept.push_back(doc.dump());
    for (const Json& doc : f.content["invalid"]) reject.push_back(doc.dump());
    Json c = Json::object();
    c["name"] = f.name;
    c["schema"] = f.content["schema"];
    c["accept"] = std::move(accept);
    c["reject"] = std::move(reject);
    cases.push_back(std::move(c));
  }
  EXPECT_GE(sampled, 30u * 60u);
  Json all = Json::object();
  all["cases"] = std::move(cases);
  const auto [status, output] = RunAjv(all);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find(" 0 failed"), std::string::npos) << output;
}

// The ajv harness itself can fail: a document outside the schema is caught.
TEST(JsonSchemaCorpusTest, AjvHarnessRejectsWhatItShould) {
  const Json schema = {{"type", "object"},
                       {"properties", {{"n", {{"type", "integer"}, {"maximum", 3}}}}},
                       {"required", {"n"}}};
  Json probe = Json::object();
  probe["name"] = "probe";
  probe["schema"] = schema;
  probe["accept"] = Json::array({"{\"n\": 4}", "{\"n\": 1"});  // out of range; not JSON
  probe["reject"] = Json::array({"{\"n\": 2}"});                   // valid
  Json cases = Json::object();
  cases["cases"] = Json::array({probe});
  const auto [status, output] = RunAjv(cases);
  EXPECT_EQ(status, 1) << output;
  EXPECT_NE(output.find("ajv: 0 passed, 3 failed"), std::string::npos) << output;
}

}  // namespace
}  // namespace floe::grammar
