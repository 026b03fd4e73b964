// The body fields that constrain what the model may write, on both
// /v1/completions and /v1/chat/completions, mapped onto
// GenerateRequest.structured_output (docs/openai-api.md, "Structured
// outputs"):
// - OpenAI's `response_format`: {"type": "text"} (no constraint),
//   {"type": "json_object"}, {"type": "json_schema", "json_schema": {name,
//   schema, strict, description}};
// - vLLM's `structured_outputs`: exactly one of json (a schema object, or a
//   string holding one), regex, choice, grammar, json_object;
// - vLLM's older top-level guided_json, guided_regex, guided_choice,
//   guided_grammar (guided_decoding_backend accepted and ignored: one engine).
// At most one of these fields may set a constraint: a second is a 400 naming
// both. Bounds are resolve_request.h's (CheckStructuredOutput), named by the
// field the client wrote. An option that would change what output is allowed
// and that the engine does not have (a whitespace pattern) is a 400, never
// dropped.
//
// One instance per request body, used by one thread while it is parsed.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "floe/v1/generate.pb.h"
#include "services/router/openai/openai_request.h"

namespace floe::openai {

class StructuredOutputFields {
 public:
  using Handler = std::function<std::optional<ApiError>(const std::string&, const nlohmann::ordered_json&)>;

  // The handlers of these fields for the request's field table, by name;
  // each is called with the field's name and value, and refers to *this.
  std::map<std::string, Handler> Handlers();

  // The constraint the fields read so far set; nullopt: none (or text).
  const std::optional<floe::v1::StructuredOutput>& output() const { return output_; }

 private:
  std::optional<ApiError> ResponseFormat(const nlohmann::ordered_json& v);
  std::optional<ApiError> StructuredOutputs(const nlohmann::ordered_json& v);
  // Records `output`, set by the body field `source`; `field` names the
  // constraint's value for bound errors.
  std::optional<ApiError> Set(const std::string& source, const std::string& field, floe::v1::StructuredOutput output);

  std::string source_;  // the field that set output_
  std::optional<floe::v1::StructuredOutput> output_;
};

}  // namespace floe::openai
