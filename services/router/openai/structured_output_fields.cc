#include "services/router/openai/structured_output_fields.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json/bounded_json.h"
#include "services/request/resolve_request.h"
#include "services/router/openai/json_readers.h"

namespace floe::openai {
namespace {

using floe::v1::StructuredOutput;
using nlohmann::ordered_json;

// Strings are bounded by CheckStructuredOutput once the constraint is built,
// in one place for every front.
constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();
// OpenAI's limit on response_format.json_schema.name.
constexpr size_t kMaxSchemaNameChars = 64;
// guided_decoding_backend: a backend's name, accepted and not used.
constexpr size_t kMaxBackendNameBytes = 256;

constexpr char kFixedWhitespace[] = "the engine's JSON whitespace is fixed and bounded";

std::optional<ApiError> NullableBool(const std::string& name, const ordered_json& v, bool* out) {
  if (v.is_null()) return std::nullopt;
  return Bool(name, v, out);
}

// An unknown key inside one of these objects, echoed at most 64 bytes.
ApiError Unknown(const std::string& object, const std::string& key) {
  const std::string at = absl::StrCat(object, ".", key.substr(0, 64));
  return Bad(at, absl::StrCat("unknown field ", at));
}

// A JSON Schema: an object, serialized compactly with the client's key
// order (the worker compiles properties in that order); with `allow_text`
// (vLLM's forms) also a string holding one, parsed with the body's depth
// bound.
std::optional<ApiError> SchemaText(const std::string& name, const ordered_json& v, bool allow_text,
                                   std::string* out) {
  if (v.is_string() && allow_text) {
    // The message names the path of a depth error inside the text.
    absl::StatusOr<ordered_json> parsed = ParseUntrustedJson(v.get_ref<const std::string&>());
    if (!parsed.ok()) return Bad(name, absl::StrCat(name, ": ", parsed.status().message()));
    if (!parsed->is_object())
      return Bad(name, absl::StrCat(name, " must hold a JSON Schema object, not ", TypeName(*parsed)));
    *out = parsed->dump();
    return std::nullopt;
  }
  if (!v.is_object())
    return Bad(name, absl::StrCat(name, " must be a JSON Schema object", allow_text ? " (or a string holding one)" : "",
                                  ", not ", TypeName(v)));
  // The body parsed as UTF-8, so nothing is replaced; the handler only
  // guarantees dump() never throws.
  *out = v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  return std::nullopt;
}

std::optional<ApiError> Choices(const std::string& name, const ordered_json& v, floe::v1::ChoiceList* out) {
  if (!v.is_array()) return Bad(name, absl::StrCat(name, " must be an array of strings, not ", TypeName(v)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return Bad(name, absl::StrCat(name, "[", i, "] must be a string, not ", TypeName(v[i])));
    out->add_choices(v[i].get<std::string>());
  }
  return std::nullopt;
}

// vLLM's four constraint kinds, as structured_outputs.<kind> and guided_<kind>.
enum class Kind { kJson, kRegex, kChoice, kGrammar };

std::optional<ApiError> ReadKind(Kind kind, const std::string& name, const ordered_json& v, StructuredOutput* out) {
  std::string text;
  switch (kind) {
    case Kind::kJson:
      if (auto e = SchemaText(name, v, /*allow_text=*/true, &text)) return e;
      out->set_json_schema(std::move(text));
      return std::nullopt;
    case Kind::kRegex:
      if (auto e = String(name, v, kUnbounded, &text)) return e;
      out->set_regex(std::move(text));
      return std::nullopt;
    case Kind::kGrammar:
      if (auto e = String(name, v, kUnbounded, &text)) return e;
      out->set_grammar(std::move(text));
      return std::nullopt;
    case Kind::kChoice:
      return Choices(name, v, out->mutable_choice());
  }
  return std::nullopt;
}

// OpenAI: "a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum
// length of 64".
bool ValidSchemaName(const std::string& name) {
  if (name.empty() || name.size() > kMaxSchemaNameChars) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

// response_format.json_schema: {name, schema, strict, description}.
std::optional<ApiError> JsonSchemaFormat(const ordered_json& v, StructuredOutput* out) {
  const std::string at = "response_format.json_schema";
  if (!v.is_object()) return Bad(at, absl::StrCat(at, " must be an object with name and schema, not ", TypeName(v)));
  bool has_name = false, has_schema = false;
  for (const auto& [key, value] : v.items()) {
    const std::string field = absl::StrCat(at, ".", key.substr(0, 64));
    if (key == "name") {
      std::string name;
      if (auto e = String(field, value, kUnbounded, &name)) return e;
      if (!ValidSchemaName(name))
        return Bad(field, absl::StrCat(field, " must be 1 to ", kMaxSchemaNameChars,
                                       " characters of a-z, A-Z, 0-9, _ and -"));
      has_name = true;
    } else if (key == "schema") {
      std::string text;
      if (auto e = SchemaText(field, value, /*allow_text=*/false, &text)) return e;
      out->set_json_schema(std::move(text));
      has_schema = true;
    } else if (key == "strict") {
      bool strict = false;
      if (auto e = NullableBool(field, value, &strict)) return e;
      out->set_strict(strict);
    } else if (key == "description") {
      // Guidance for the model in OpenAI's prompt; Floe writes no prompt of
      // its own, so it is checked and not used.
      if (value.is_null()) continue;
      std::string description;
      if (auto e = String(field, value, kUnbounded, &description)) return e;
    } else {
      return Unknown(at, key);
    }
  }
  if (!has_name) return Bad(at + ".name", at + ".name is required");
  if (!has_schema) return Bad(at + ".schema", at + ".schema is required");
  return std::nullopt;
}

}  // namespace

std::map<std::string, StructuredOutputFields::Handler> StructuredOutputFields::Handlers() {
  std::map<std::string, Handler> handlers = {
      {"response_format", [this](const std::string&, const ordered_json& v) { return ResponseFormat(v); }},
      {"structured_outputs", [this](const std::string&, const ordered_json& v) { return StructuredOutputs(v); }},
      {"guided_decoding_backend", [](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         // It picks vLLM's implementation (xgrammar, outlines, guidance), not
         // what output is allowed, and Floe has one engine.
         if (v.is_null()) return std::nullopt;
         std::string backend;
         return String(n, v, kMaxBackendNameBytes, &backend);
       }},
      {"guided_whitespace_pattern", [](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         return Bad(n, absl::StrCat(n, " is not supported: ", kFixedWhitespace));
       }},
  };
  const std::pair<const char*, Kind> guided[] = {
      {"guided_json", Kind::kJson}, {"guided_regex", Kind::kRegex},
      {"guided_choice", Kind::kChoice}, {"guided_grammar", Kind::kGrammar}};
  for (const auto& [name, kind] : guided) {
    handlers[name] = [this, kind = kind](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
      if (v.is_null()) return std::nullopt;  // vLLM's default
      StructuredOutput output;
      if (auto e = ReadKind(kind, n, v, &output)) return e;
      return Set(n, n, std::move(output));
    };
  }
  return handlers;
}

std::optional<ApiError> StructuredOutputFields::ResponseFormat(const ordered_json& v) {
  const std::string at = "response_format";
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return Bad(at, absl::StrCat(at, " must be an object with a \"type\", not ", TypeName(v)));
  if (!v.contains("type") || !v["type"].is_string())
    return Bad(at + ".type", "response_format.type must be a string: text, json_object or json_schema");
  const std::string& type = v["type"].get_ref<const std::string&>();
  if (type != "text" && type != "json_object" && type != "json_schema")
    return Bad(at + ".type",
               absl::StrCat("response_format.type is \"", type.substr(0, 64),
                            "\"; expected text, json_object or json_schema"));
  for (const auto& [key, value] : v.items()) {
    if (key != "type" && !(key == "json_schema" && type == "json_schema")) return Unknown(at, key);
  }
  if (type == "text") return std::nullopt;
  StructuredOutput output;
  if (type == "json_object") {
    output.set_json_object(true);
    return Set(at, at, std::move(output));
  }
  if (!v.contains("json_schema"))
    return Bad(at + ".json_schema", "response_format.json_schema is required with type \"json_schema\"");
  if (auto e = JsonSchemaFormat(v["json_schema"], &output)) return e;
  return Set(at, "response_format.json_schema.schema", std::move(output));
}

std::optional<ApiError> StructuredOutputFields::StructuredOutputs(const ordered_json& v) {
  const std::string at = "structured_outputs";
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return Bad(at, absl::StrCat(at, " must be an object, not ", TypeName(v)));
  const std::pair<const char*, Kind> kinds[] = {
      {"json", Kind::kJson}, {"regex", Kind::kRegex}, {"choice", Kind::kChoice}, {"grammar", Kind::kGrammar}};
  StructuredOutput output;
  std::vector<std::string> set;  // the constraint keys given, in body order
  bool closed_objects = false;
  for (const auto& [key, value] : v.items()) {
    const std::string field = absl::StrCat(at, ".", key.substr(0, 64));
    bool is_kind = false;
    for (const auto& [name, kind] : kinds) {
      if (key != name) continue;
      is_kind = true;
      if (value.is_null()) break;  // vLLM's unset
      if (auto e = ReadKind(kind, field, value, &output)) return e;
      set.push_back(key);
    }
    if (is_kind) continue;
    bool on = false;  // the boolean options: null is vLLM's default, false
    if (key == "json_object") {
      if (auto e = NullableBool(field, value, &on)) return e;
      if (on) {
        output.set_json_object(true);
        set.push_back(key);
      }
    } else if (key == "disable_fallback") {
      // No other backend to fall back to: the constraint is always the engine's.
      if (auto e = NullableBool(field, value, &on)) return e;
    } else if (key == "disable_additional_properties") {
      // vLLM's name for what `strict` does: objects are closed unless the
      // schema says otherwise.
      if (auto e = NullableBool(field, value, &closed_objects)) return e;
    } else if (key == "disable_any_whitespace") {
      // Would change which outputs are allowed; accepting it would be a
      // silent lie.
      if (auto e = NullableBool(field, value, &on)) return e;
      if (on) return Bad(field, absl::StrCat(field, " is not supported: ", kFixedWhitespace));
    } else if (key == "whitespace_pattern") {
      if (!value.is_null()) return Bad(field, absl::StrCat(field, " is not supported: ", kFixedWhitespace));
    } else if (key == "structural_tag") {
      if (!value.is_null()) return Bad(field, absl::StrCat(field, " is not supported"));
    } else {
      return Unknown(at, key);
    }
  }
  if (set.size() != 1)
    return Bad(at, absl::StrCat(at, set.empty() ? " sets none" : absl::StrCat(" sets ", absl::StrJoin(set, " and ")),
                                "; set exactly one of json, regex, choice, grammar, json_object"));
  if (closed_objects) {
    if (!output.has_json_schema())
      return Bad(at + ".disable_additional_properties",
                 "structured_outputs.disable_additional_properties applies to json only");
    output.set_strict(true);
  }
  return Set(at, absl::StrCat(at, ".", set[0]), std::move(output));
}

std::optional<ApiError> StructuredOutputFields::Set(const std::string& source, const std::string& field,
                                                    StructuredOutput output) {
  if (output_)
    return Bad(source, absl::StrCat(source, " and ", source_, " both constrain the output; send one of them"));
  if (absl::Status s = CheckStructuredOutput(output, field); !s.ok()) return Bad(field, std::string(s.message()));
  source_ = source;
  output_ = std::move(output);
  return std::nullopt;
}

}  // namespace floe::openai
