// POST /v1/responses bodies (the subset the OpenAI Agents SDK and the
// `openai` client send) translated into a /v1/chat/completions body, so one
// place (openai_request.h's ParseFields) checks and resolves every request:
//   instructions        -> a leading system message
//   input               -> messages: a string is one user message; items are
//                          messages (role + string or input_text/output_text
//                          parts), function_call (consecutive calls join one
//                          assistant turn, with its text when it came just
//                          before) and function_call_output (a tool message)
//   tools               -> function tools ({type, name, description,
//                          parameters, strict} flattened as OpenAI's
//                          Responses tools are) nested as chat's
//   tool_choice, parallel_tool_calls, temperature, top_p, stream: as is
//   max_output_tokens   -> max_tokens
//   text.format         -> response_format (text, json_object, json_schema)
//   reasoning.effort    -> reasoning_effort (a template variable)
//   seed, top_k, skip_special_tokens, forced_output_ids: chat's (vLLM's and
//                          Floe's extras), passed through
// Refused by name: previous_response_id and conversation (Floe keeps no
// responses), store: true, background: true, prompt (a stored prompt),
// built-in tools (web_search, file_search, ...), items other than the
// above. Accepted and ignored (listed in `ignored`, refused under
// --strict-fields): store: false, metadata, include, truncation
// ("disabled"), user, service_tier, safety_identifier, prompt_cache_key,
// prompt_cache_retention, prompt_cache_options, context_management,
// top_logprobs (0), max_tool_calls. Unknown fields are a 400 naming them.
// Pure functions, no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/router/openai/openai_request.h"

namespace floe::openai {

struct ResponsesRequest {
  // The chat body for ParseFields(Endpoint::kChat, ...).
  nlohmann::ordered_json chat;
  // Fields accepted and ignored, by name, in body order.
  std::vector<std::string> ignored;
  // What the response object echoes back (OpenAI's Response fields).
  nlohmann::ordered_json instructions;  // null or the string
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  nlohmann::ordered_json tool_choice = "auto";
  nlohmann::ordered_json text = {{"format", {{"type", "text"}}}};
  nlohmann::ordered_json temperature, top_p, max_output_tokens;
  bool parallel_tool_calls = true;
};

std::optional<ApiError> ParseResponsesRequest(const nlohmann::ordered_json& body, bool strict_fields,
                                              ResponsesRequest* out);

// A chat-field error renamed for a Responses client ("messages[2]" ->
// "input", "max_tokens" -> "max_output_tokens", ...).
ApiError AsResponsesError(ApiError error);

}  // namespace floe::openai
