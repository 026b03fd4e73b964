#include "services/cli/structured_output_flags.h"

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json/bounded_json.h"
#include "services/request/resolve_request.h"

namespace floe {
namespace {

// A file flag's text, read no further than what could pass its bound (a
// schema file may be indented: its compact form is what is bounded, so the
// caller allows the file more).
absl::Status ReadBounded(const std::string& flag, const std::string& path, size_t max_bytes, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot open ", path));
  out->resize(max_bytes + 1);
  in.read(out->data(), static_cast<std::streamsize>(out->size()));
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  out->resize(static_cast<size_t>(in.gcount()));
  if (out->size() > max_bytes)
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " has more than ", max_bytes, " bytes (the limit)"));
  return absl::OkStatus();
}

}  // namespace

void StructuredOutputFlags::Register(ArgParser& parser) {
  parser.AddString("json-schema", &json_schema_file,
                   "structured output: one JSON document valid against the JSON Schema in FILE");
  parser.AddBool("strict", &strict,
                 "with --json-schema: objects are closed (additionalProperties false unless the schema says)");
  parser.AddBool("json-object", &json_object, "structured output: any JSON object");
  parser.AddString("regex", &regex, "structured output: the whole output matches this regular expression");
  parser.AddString("choice", &choice, "structured output: exactly one of these comma-separated strings (not trimmed)");
  parser.AddString("grammar", &grammar_file, "structured output: FILE holds a GBNF grammar (start rule `root`)");
}

absl::Status StructuredOutputFlags::Apply(floe::v1::GenerateRequest* request) const {
  std::vector<std::string> given;
  if (!json_schema_file.empty()) given.push_back("--json-schema");
  if (json_object) given.push_back("--json-object");
  if (!regex.empty()) given.push_back("--regex");
  if (!choice.empty()) given.push_back("--choice");
  if (!grammar_file.empty()) given.push_back("--grammar");
  if (given.size() > 1)
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(given, " and "), " each constrain the output; give one of them"));
  if (strict && json_schema_file.empty()) return absl::InvalidArgumentError("--strict needs --json-schema");
  if (given.empty()) return absl::OkStatus();

  floe::v1::StructuredOutput output;
  if (!json_schema_file.empty()) {
    std::string text;
    if (absl::Status s = ReadBounded("--json-schema", json_schema_file, 16 * kMaxJsonSchemaBytes, &text); !s.ok())
      return s;
    auto schema = ParseUntrustedJson(text);
    if (!schema.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("--json-schema ", json_schema_file, ": ", schema.status().message()));
    if (!schema->is_object())
      return absl::InvalidArgumentError(
          absl::StrCat("--json-schema ", json_schema_file, ": a JSON Schema must be an object"));
    output.set_json_schema(schema->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    output.set_strict(strict);
  } else if (json_object) {
    output.set_json_object(true);
  } else if (!regex.empty()) {
    output.set_regex(regex);
  } else if (!choice.empty()) {
    for (absl::string_view item : absl::StrSplit(choice, ',')) output.mutable_choice()->add_choices(std::string(item));
  } else {
    std::string text;
    if (absl::Status s = ReadBounded("--grammar", grammar_file, kMaxGrammarBytes, &text); !s.ok()) return s;
    output.set_grammar(std::move(text));
  }
  if (absl::Status s = CheckStructuredOutput(output, given[0]); !s.ok()) return s;
  *request->mutable_structured_output() = std::move(output);
  return absl::OkStatus();
}

}  // namespace floe
