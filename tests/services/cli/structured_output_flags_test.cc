// floe generate's structured-output flags: each maps onto
// GenerateRequest.structured_output as over gRPC, from real files, and each
// mistake is refused naming the flag (and the limit).
#include "services/cli/structured_output_flags.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/request/resolve_request.h"

namespace floe {
namespace {

namespace fs = std::filesystem;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = (fs::path(::testing::TempDir()) / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Parses `args` as floe generate would, then applies them to a request.
absl::Status Apply(std::vector<std::string> args, floe::v1::GenerateRequest* request) {
  ArgParser parser("floe generate", "");
  StructuredOutputFlags flags;
  flags.Register(parser);
  std::vector<char*> argv = {const_cast<char*>("floe")};
  for (std::string& arg : args) argv.push_back(arg.data());
  if (absl::Status s = parser.Parse(static_cast<int>(argv.size()), argv.data()); !s.ok()) return s;
  return flags.Apply(request);
}

TEST(StructuredOutputFlagsTest, EachFlagSetsItsConstraint) {
  floe::v1::GenerateRequest none;
  ASSERT_TRUE(Apply({}, &none).ok());
  EXPECT_FALSE(none.has_structured_output());

  // The schema file is sent compact, its key order kept.
  const std::string schema = WriteFile("schema.json", "{\n  \"type\": \"object\",\n  \"required\": [\"b\"],\n"
                                                      "  \"properties\": {\"b\": {\"type\": \"string\"}}\n}\n");
  floe::v1::GenerateRequest r;
  ASSERT_TRUE(Apply({"--json-schema", schema, "--strict"}, &r).ok());
  EXPECT_EQ(r.structured_output().json_schema(),
            R"({"type":"object","required":["b"],"properties":{"b":{"type":"string"}}})");
  EXPECT_TRUE(r.structured_output().strict());

  r.Clear();
  ASSERT_TRUE(Apply({"--json-object"}, &r).ok());
  EXPECT_TRUE(r.structured_output().json_object());

  r.Clear();
  ASSERT_TRUE(Apply({"--regex", "[0-9]+(,[0-9]+)*"}, &r).ok());
  EXPECT_EQ(r.structured_output().regex(), "[0-9]+(,[0-9]+)*");

  r.Clear();
  ASSERT_TRUE(Apply({"--choice", "yes,no, maybe"}, &r).ok());
  const auto& choices = r.structured_output().choice().choices();
  EXPECT_EQ(std::vector<std::string>(choices.begin(), choices.end()),
            (std::vector<std::string>{"yes", "no", " maybe"}));  // exact: a leading space is a different output

  r.Clear();
  const std::string grammar = WriteFile("g.gbnf", "root ::= \"a\" | \"b\"\n");
  ASSERT_TRUE(Apply({"--grammar", grammar}, &r).ok());
  EXPECT_EQ(r.structured_output().grammar(), "root ::= \"a\" | \"b\"\n");
  // What the flags build, the gRPC side accepts.
  r.mutable_token_ids()->add_ids(1);
  EXPECT_TRUE(ResolveRequest(RequestLimits{.vocab_size = 10, .max_context = 8, .max_tokens_limit = 4}, r).ok());
}

TEST(StructuredOutputFlagsTest, MistakesNameTheFlag) {
  const std::string schema = WriteFile("ok.json", R"({"type": "integer"})");
  const std::string array = WriteFile("array.json", "[1, 2]");
  const std::string broken = WriteFile("broken.json", "{\"type\": ");
  const std::string big_schema = WriteFile("big.json", "{\"description\": \"" + std::string(kMaxJsonSchemaBytes, 'd') + "\"}");
  const std::string huge_grammar = WriteFile("huge.gbnf", std::string(kMaxGrammarBytes + 1, 'a'));
  const std::string empty_grammar = WriteFile("empty.gbnf", "");
  struct Case {
    std::vector<std::string> args;
    absl::StatusCode code;
    std::string message;  // a part of it
  } cases[] = {
      {{"--regex", "a", "--choice", "a,b"}, absl::StatusCode::kInvalidArgument,
       "--regex and --choice each constrain the output; give one of them"},
      {{"--json-schema", schema, "--json-object"}, absl::StatusCode::kInvalidArgument, "--json-schema and --json-object"},
      {{"--strict"}, absl::StatusCode::kInvalidArgument, "--strict needs --json-schema"},
      {{"--regex", "a", "--strict"}, absl::StatusCode::kInvalidArgument, "--strict needs --json-schema"},
      {{"--json-schema", "/nonexistent/schema.json"}, absl::StatusCode::kNotFound, "--json-schema: cannot open"},
      {{"--json-schema", array}, absl::StatusCode::kInvalidArgument, "a JSON Schema must be an object"},
      {{"--json-schema", broken}, absl::StatusCode::kInvalidArgument, "not valid JSON"},
      {{"--json-schema", big_schema}, absl::StatusCode::kInvalidArgument, "--json-schema has 65554 bytes; the limit is 65536"},
      {{"--grammar", huge_grammar}, absl::StatusCode::kInvalidArgument, "has more than 65536 bytes (the limit)"},
      {{"--grammar", empty_grammar}, absl::StatusCode::kInvalidArgument, "--grammar is empty"},
      {{"--regex", std::string(kMaxRegexBytes + 1, 'a')}, absl::StatusCode::kInvalidArgument,
       "--regex has 4097 bytes; the limit is 4096"},
      {{"--choice", "a,,b"}, absl::StatusCode::kInvalidArgument, "--choice[1] has 0 bytes; each choice must have 1 to 1024"},
  };
  for (const Case& c : cases) {
    floe::v1::GenerateRequest r;
    const absl::Status s = Apply(c.args, &r);
    EXPECT_EQ(s.code(), c.code) << c.args[0] << ": " << s;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << c.args[0] << ": " << s;
    EXPECT_FALSE(r.has_structured_output()) << c.args[0];
  }
}

TEST(StructuredOutputFlagsTest, HelpDocumentsEveryFlag) {
  ArgParser parser("floe generate", "");
  StructuredOutputFlags flags;
  flags.Register(parser);
  const std::string help = parser.Help();
  for (const char* flag : {"--json-schema VALUE", "--strict", "--json-object", "--regex VALUE", "--choice VALUE",
                           "--grammar VALUE"})
    EXPECT_NE(help.find(flag), std::string::npos) << flag << " missing from:\n" << help;
}

}  // namespace
}  // namespace floe
