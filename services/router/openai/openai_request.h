// OpenAI's /v1/completions and /v1/chat/completions request bodies, checked
// and mapped onto floe.v1.GenerateRequest. Every field is known: an unknown
// one, a wrong type or a value out of range is an ApiError naming the field
// (OpenAI's `param`) and the limit. Fields OpenAI or vLLM define that change
// nothing Floe generates (FindIgnoredField: store, metadata, ...) are
// accepted and listed in ParsedRequest::ignored_fields, or refused by name
// under RequestContext::strict_fields. The body is parsed with its nesting
// bounded (common/json/bounded_json.h): deeper than 64 levels is an ApiError
// naming the field, before anything recurses over it. The fields that
// constrain the output (response_format, structured_outputs, guided_*) are
// structured_output_fields.h's. Pure functions, no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "floe/v1/generate.pb.h"

namespace floe {
class ChatTemplate;
}

namespace floe::openai {

// OpenAI's error object; `status` is the HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

enum class Endpoint { kCompletions, kChat };

struct ParsedRequest {
  floe::v1::GenerateRequest generate;
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;
  // Completions: top alternatives per token (logprobs = N). Chat: logprobs
  // true and top_logprobs = N. Unset: no logprobs.
  std::optional<int> logprobs;
  std::string model;  // as the client named it (echoed back)
  // Floe's (and vLLM's) extra: each choice also carries "token_ids".
  bool return_token_ids = false;
  // Fields accepted and ignored (FindIgnoredField's names, never the
  // client's text), in body order.
  std::vector<std::string> ignored_fields;
  // Chat with tools: how the output is read for calls. kNone: not at all
  // (no tools, or tool_choice "none"); kAuto: by the router's
  // --tool-call-parser; kRequired and kNamed: the output is constrained
  // (generate.structured_output) to a JSON array of {"name", "parameters"},
  // or to the named function's arguments.
  enum class ToolChoice { kNone, kAuto, kRequired, kNamed };
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_name;  // kNamed
  bool parallel_tool_calls = true;
  // Completions: the prompt comes back before the completion (text or, for
  // a prompt of ids, their decoding).
  bool echo = false;
  // vLLM's prompt_logprobs (top alternatives per prompt token; the answer
  // then carries "prompt_logprobs"); unset: none. Echo with logprobs asks
  // the worker for them too (generate.logprobs.prompt_top_n).
  std::optional<int> prompt_logprobs;
};

struct RequestContext {
  // The model's chat template; null when it has none (chat is then refused).
  const ChatTemplate* chat_template = nullptr;
  // x-session-id / x-request-id headers (the body's session_id wins).
  std::string session_header;
  std::string request_id_header;
  // --strict-fields: ignorable fields are refused like unknown ones.
  bool strict_fields = false;
};

// A field OpenAI or vLLM define that Floe accepts and ignores, and why.
struct IgnoredField {
  const char* name;
  const char* why;
};
// The ignorable field `name` for `endpoint`, or null.
const IgnoredField* FindIgnoredField(std::string_view name, Endpoint endpoint);

// Parses a request body for `endpoint`.
std::optional<ApiError> Parse(Endpoint endpoint, const std::string& body, const RequestContext& context,
                              ParsedRequest* out);
// The two halves of Parse: the body as a bounded JSON object, then its
// fields (also used by /tokenize, whose bodies are a subset).
std::optional<ApiError> ParseBody(const std::string& body, nlohmann::ordered_json* out);
std::optional<ApiError> ParseFields(Endpoint endpoint, const nlohmann::ordered_json& request,
                                    const RequestContext& context, ParsedRequest* out);

// nlohmann::json of the error, as OpenAI sends it: {"error": {...}}.
nlohmann::json ErrorJson(const ApiError& error);

}  // namespace floe::openai
