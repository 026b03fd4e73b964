#include "services/router/openai/tokenize_request.h"

#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "services/router/openai/json_readers.h"

namespace floe::openai {

using nlohmann::ordered_json;

std::optional<ApiError> ParseTokenize(const std::string& body, const RequestContext& context, TokenizeRequest* out) {
  ordered_json request;
  if (auto e = ParseBody(body, &request)) return e;
  const bool chat = request.contains("messages");
  if (chat && request.contains("prompt")) return Bad("prompt", "send prompt or messages, not both");
  if (!chat && !request.contains("prompt")) return Bad("prompt", "prompt or messages is required");
  static const std::set<std::string> kChatFields = {"model", "messages", "add_generation_prompt", "add_special_tokens",
                                                    "tools", "chat_template_kwargs", "reasoning_effort"};
  static const std::set<std::string> kPromptFields = {"model", "prompt", "add_special_tokens"};
  // The fields /v1/*completions reads the same way; the rest are /tokenize's.
  ordered_json fields = ordered_json::object();
  std::optional<bool> add_special_tokens;
  for (const auto& [key, value] : request.items()) {
    const std::string shown = key.substr(0, 64);
    if (key == "return_token_strs" || key == "continue_final_message") {
      bool b = false;
      if (!value.is_null()) {
        if (auto e = Bool(key, value, &b)) return e;
      }
      if (b) return Bad(key, absl::StrCat(key, " is not supported"));
      continue;
    }
    if (key == "add_special_tokens") {
      bool b;
      if (auto e = Bool(key, value, &b)) return e;
      add_special_tokens = b;
      continue;
    }
    if (!(chat ? kChatFields : kPromptFields).contains(key))
      return Bad(shown, absl::StrCat("unknown field \"", shown, "\" for /tokenize", chat ? " with messages" : ""));
    fields[key] = value;
  }
  ParsedRequest parsed;
  if (auto e = ParseFields(chat ? Endpoint::kChat : Endpoint::kCompletions, fields, context, &parsed)) return e;
  const floe::v1::GenerateRequest& g = parsed.generate;
  out->model = parsed.model;
  if (g.has_token_ids()) {
    out->ids.assign(g.token_ids().ids().begin(), g.token_ids().ids().end());
  } else {
    out->text = g.text();
  }
  // vLLM's defaults: a prompt gets the tokenizer's special tokens, a
  // rendered chat none beyond what the template wrote.
  out->add_special_tokens = add_special_tokens.value_or(!chat);
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenize(const std::string& body, DetokenizeRequest* out) {
  ordered_json request;
  if (auto e = ParseBody(body, &request)) return e;
  bool has_tokens = false;
  for (const auto& [key, value] : request.items()) {
    if (key == "model") {
      if (auto e = String(key, value, 256, &out->model)) return e;
    } else if (key == "tokens") {
      if (!value.is_array()) return Bad(key, "tokens must be an array of token ids");
      if (value.size() > kMaxDetokenizeIds)
        return Bad(key, absl::StrCat("tokens has ", value.size(), " ids; the limit is ", kMaxDetokenizeIds));
      out->ids.reserve(value.size());
      for (size_t i = 0; i < value.size(); ++i) {
        int64_t id;
        if (auto e = Integer(absl::StrCat("tokens[", i, "]"), value[i], 0, std::numeric_limits<int32_t>::max(), &id))
          return Bad(key, e->message);
        out->ids.push_back(static_cast<int32_t>(id));
      }
      has_tokens = true;
    } else {
      const std::string shown = key.substr(0, 64);
      return Bad(shown, absl::StrCat("unknown field \"", shown, "\" for /detokenize"));
    }
  }
  if (!has_tokens) return Bad("tokens", "tokens is required");
  return std::nullopt;
}

}  // namespace floe::openai
