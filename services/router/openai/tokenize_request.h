// vLLM's POST /tokenize and POST /detokenize bodies, checked.
//
// /tokenize takes a completions-style {"prompt": "..."} (add_special_tokens
// defaults to true) or a chat-style {"messages": [...]} rendered through the
// served chat template exactly as /v1/chat/completions renders it
// (add_generation_prompt, tools, chat_template_kwargs, reasoning_effort;
// add_special_tokens defaults to false: the template writes BOS), and
// "model". /detokenize takes {"tokens": [ids], "model"}. Any other field, a
// wrong type or a value out of range is an ApiError naming the field. Pure
// functions, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "services/router/openai/openai_request.h"

namespace floe::openai {

struct TokenizeRequest {
  std::string model;  // empty: the served one
  // What to encode: text (encoded with add_special_tokens) or, for a
  // completions prompt given as ids, the ids themselves.
  std::optional<std::string> text;
  std::vector<int32_t> ids;
  bool add_special_tokens = true;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> ids;
};

// The most ids one /detokenize decodes (as gRPC Detokenize).
inline constexpr size_t kMaxDetokenizeIds = 1 << 18;

std::optional<ApiError> ParseTokenize(const std::string& body, const RequestContext& context, TokenizeRequest* out);
std::optional<ApiError> ParseDetokenize(const std::string& body, DetokenizeRequest* out);

}  // namespace floe::openai
