#include "services/router/openai/openai_request.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/chat_template.h"
#include "common/json/bounded_json.h"
#include "services/router/openai/json_readers.h"
#include "services/router/openai/structured_output_fields.h"

namespace floe::openai {
namespace {

using nlohmann::json;
// The body keeps the client's key order all the way to the chat template.
using nlohmann::ordered_json;

constexpr int kMaxLogprobs = 20;
constexpr int kMaxStops = 16;
constexpr size_t kMaxMessages = 4096;
constexpr size_t kMaxUserBytes = 256;
// Each becomes a template variable (ChatTemplate::Apply inserts them one by
// one into an ordered object, a scan per insert); real templates read a few.
constexpr size_t kMaxTemplateKwargs = 64;

std::optional<ApiError> TokenIdList(const std::string& name, const ordered_json& v, floe::v1::TokenIds* out) {
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id;
    if (auto e = Integer(absl::StrCat(name, "[", i, "]"), v[i], 0, std::numeric_limits<int32_t>::max(), &id))
      return Bad(name, e->message);
    out->add_ids(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// prompt: a string, one string in an array, token ids, or one list of token ids.
std::optional<ApiError> Prompt(const ordered_json& v, floe::v1::GenerateRequest* g) {
  const std::string name = "prompt";
  if (v.is_string()) {
    g->set_text(v.get<std::string>());
    return std::nullopt;
  }
  if (!v.is_array() || v.empty())
    return Bad(name, "prompt must be a string, an array of strings, or an array of token ids");
  if (v[0].is_number()) return TokenIdList(name, v, g->mutable_token_ids());
  if (v.size() > 1)
    return Bad(name, absl::StrCat("prompt holds ", v.size(), " prompts; one prompt per request is supported (send one "
                                  "request each)"));
  if (v[0].is_string()) {
    g->set_text(v[0].get<std::string>());
    return std::nullopt;
  }
  if (v[0].is_array() && !v[0].empty()) return TokenIdList(name, v[0], g->mutable_token_ids());
  return Bad(name, "prompt must be a string, an array of strings, or an array of token ids");
}

// OpenAI's message content: a string, null, or text parts.
std::optional<ApiError> Content(const std::string& name, const ordered_json& v, ordered_json* out) {
  if (v.is_null() || v.is_string()) {
    *out = v;
    return std::nullopt;
  }
  if (!v.is_array()) return Bad(name, absl::StrCat(name, " must be a string, null or an array of text parts"));
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const ordered_json& part = v[i];
    const std::string at = absl::StrCat(name, "[", i, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return Bad(at, absl::StrCat(at, " must be an object with a \"type\""));
    if (part["type"] != "text")
      return Bad(at, absl::StrCat(at, " has type ", part["type"].dump().substr(0, 64),
                                  "; only \"text\" parts are supported"));
    if (!part.contains("text") || !part["text"].is_string())
      return Bad(at, absl::StrCat(at, ".text must be a string"));
    text += part["text"].get<std::string>();
  }
  *out = text;
  return std::nullopt;
}

std::optional<ApiError> Messages(const ordered_json& v, ordered_json* out) {
  if (!v.is_array() || v.empty()) return Bad("messages", "messages must be a non-empty array");
  if (v.size() > kMaxMessages)
    return Bad("messages", absl::StrCat("messages has ", v.size(), " entries; the limit is ", kMaxMessages));
  *out = ordered_json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const ordered_json& m = v[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(at, absl::StrCat(at, " must be an object"));
    ordered_json message = ordered_json::object();
    if (!m.contains("role") || !m["role"].is_string()) return Bad(at + ".role", at + ".role must be a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      return Bad(at + ".role", absl::StrCat(at, ".role is \"", role.substr(0, 64),
                                            "\"; expected system, developer, user, assistant or tool"));
    message["role"] = role == "developer" ? "system" : role;
    ordered_json content = nullptr;
    if (m.contains("content")) {
      if (auto e = Content(at + ".content", m["content"], &content)) return e;
    }
    message["content"] = content;
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content") continue;
      if (key == "name" || key == "tool_call_id" || key == "tool_calls" || key == "reasoning_content" ||
          key == "refusal") {
        message[key] = value;  // no deeper than the parse allowed
        continue;
      }
      return Bad(at + "." + key.substr(0, 64), absl::StrCat("unknown field ", at, ".", key.substr(0, 64)));
    }
    out->push_back(std::move(message));
  }
  return std::nullopt;
}

}  // namespace

json ErrorJson(const ApiError& e) {
  json error = {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return {{"error", error}};
}

std::optional<ApiError> Parse(Endpoint endpoint, const std::string& body, const RequestContext& context,
                              ParsedRequest* out) {
  // Bounded while parsing: nothing below recurses over a level deeper than
  // kDefaultMaxJsonDepth (copies, dump(), the template's values), and a body
  // nested 100,000 deep is a 400 naming its field, not a stack overflow.
  std::string deep_field;
  absl::StatusOr<ordered_json> parsed = ParseUntrustedJson(body, JsonLimits{}, &deep_field);
  if (!parsed.ok()) {
    const std::string why(parsed.status().message());
    if (!deep_field.empty()) return Bad(deep_field, why);
    return Bad("", absl::StrCat("the request body", absl::StartsWith(why, "not valid") ? " is " : ": ", why));
  }
  const ordered_json& request = *parsed;
  if (!request.is_object()) return Bad("", "the request body must be a JSON object");
  const bool chat = endpoint == Endpoint::kChat;
  out->endpoint = endpoint;
  floe::v1::GenerateRequest& g = out->generate;
  auto* sampling = g.mutable_sampling();
  auto* stopping = g.mutable_stopping();

  bool has_prompt = false, has_messages = false;
  ordered_json messages, tools = nullptr, template_kwargs = nullptr;
  bool add_generation_prompt = true;
  bool chat_logprobs = false;
  std::optional<int64_t> top_logprobs;

  // One handler per field; a field not in the table is unknown.
  using FieldHandler = std::function<std::optional<ApiError>(const std::string&, const ordered_json&)>;
  StructuredOutputFields structured;
  std::map<std::string, FieldHandler> common = {
      {"model", [&](const std::string& n, const ordered_json& v) {
         if (auto e = String(n, v, 256, &out->model)) return e;
         g.set_model(out->model);
         return std::optional<ApiError>();
       }},
      {"max_tokens", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (auto e = Integer(n, v, 1, std::numeric_limits<int32_t>::max(), &x)) return e;
         stopping->set_max_tokens(static_cast<int32_t>(x));
         return std::nullopt;
       }},
      {"temperature", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         double x;
         if (auto e = Number(n, v, 0, 2, &x)) return e;
         sampling->set_temperature(static_cast<float>(x));
         return std::nullopt;
       }},
      {"top_p", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         double x;
         if (auto e = Number(n, v, 0, 1, &x)) return e;
         if (x == 0) return Bad(n, "top_p is 0; it must be in (0, 1]");
         sampling->set_top_p(static_cast<float>(x));
         return std::nullopt;
       }},
      {"top_k", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (auto e = Integer(n, v, -1, 1 << 20, &x)) return e;
         sampling->set_top_k(x < 0 ? 0 : static_cast<int32_t>(x));  // -1 (vLLM) and 0 disable
         return std::nullopt;
       }},
      {"min_p", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         double x;
         if (auto e = Number(n, v, 0, 1, &x)) return e;
         if (x == 1) return Bad(n, "min_p is 1; it must be in [0, 1)");
         sampling->set_min_p(static_cast<float>(x));
         return std::nullopt;
       }},
      {"seed", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (auto e = Integer(n, v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &x))
           return e;
         sampling->set_seed(static_cast<uint64_t>(x));
         return std::nullopt;
       }},
      {"presence_penalty", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         double x;
         if (auto e = Number(n, v, -2, 2, &x)) return e;
         sampling->set_presence_penalty(static_cast<float>(x));
         return std::nullopt;
       }},
      {"frequency_penalty", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         double x;
         if (auto e = Number(n, v, -2, 2, &x)) return e;
         sampling->set_frequency_penalty(static_cast<float>(x));
         return std::nullopt;
       }},
      {"repetition_penalty", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         double x;
         if (auto e = Number(n, v, 0.01, 100, &x)) return e;
         sampling->set_repetition_penalty(static_cast<float>(x));
         return std::nullopt;
       }},
      {"stop", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (v.is_string()) {
           stopping->add_stop(v.get<std::string>());
           return std::nullopt;
         }
         if (!v.is_array()) return Bad(n, "stop must be a string or an array of strings");
         if (v.size() > kMaxStops)
           return Bad(n, absl::StrCat("stop has ", v.size(), " strings; the limit is ", kMaxStops));
         for (size_t i = 0; i < v.size(); ++i) {
           if (!v[i].is_string()) return Bad(n, absl::StrCat("stop[", i, "] must be a string"));
           stopping->add_stop(v[i].get<std::string>());
         }
         return std::nullopt;
       }},
      {"stop_token_ids", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (!v.is_array() || v.size() > 64) return Bad(n, "stop_token_ids must be an array of at most 64 token ids");
         floe::v1::TokenIds ids;
         if (auto e = TokenIdList(n, v, &ids)) return e;
         stopping->mutable_stop_token_ids()->Assign(ids.ids().begin(), ids.ids().end());
         return std::nullopt;
       }},
      {"n", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (auto e = Integer(n, v, 1, 1, &x)) return Bad(n, "n must be 1 (one choice per request is supported)");
         return std::nullopt;
       }},
      {"stream", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         return Bool(n, v, &out->stream);
       }},
      {"stream_options", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (!v.is_object()) return Bad(n, "stream_options must be an object");
         for (const auto& [key, value] : v.items()) {
           if (key == "include_usage") {
             if (auto e = Bool("stream_options.include_usage", value, &out->include_usage)) return e;
           } else if (key != "continuous_usage_stats") {
             return Bad("stream_options." + key.substr(0, 64),
                        absl::StrCat("unknown field stream_options.", key.substr(0, 64)));
           }
         }
         return std::nullopt;
       }},
      {"user", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         std::string user;
         return String(n, v, kMaxUserBytes, &user);  // accepted, bounded; not used for routing
       }},
      {"session_id", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         std::string s;
         if (auto e = String(n, v, 256, &s)) return e;
         g.set_session_id(s);
         return std::nullopt;
       }},
      {"ignore_eos", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         bool b;
         if (auto e = Bool(n, v, &b)) return e;
         stopping->set_ignore_eos(b);
         return std::nullopt;
       }},
      {"min_tokens", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         int64_t x;
         if (auto e = Integer(n, v, 0, std::numeric_limits<int32_t>::max(), &x)) return e;
         stopping->set_min_tokens(static_cast<int32_t>(x));
         return std::nullopt;
       }},
      {"skip_special_tokens", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         bool b;
         if (auto e = Bool(n, v, &b)) return e;
         g.set_skip_special_tokens(b);
         return std::nullopt;
       }},
      {"return_token_ids", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         return Bool(n, v, &out->return_token_ids);
       }},
      {"logit_bias", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null() || (v.is_object() && v.empty())) return std::nullopt;
         return Bad(n, "logit_bias is not supported");
       }},
      {"best_of", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (Integer(n, v, 1, 1, &x)) return Bad(n, "best_of must be 1");
         return std::nullopt;
       }},
  };
  common.merge(structured.Handlers());
  const std::map<std::string, FieldHandler> completions_only = {
      {"prompt", [&](const std::string&, const ordered_json& v) {
         has_prompt = true;
         return Prompt(v, &g);
       }},
      {"logprobs", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (auto e = Integer(n, v, 0, kMaxLogprobs, &x)) return e;
         out->logprobs = static_cast<int>(x);
         return std::nullopt;
       }},
      {"echo", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         bool b = false;
         if (auto e = Bool(n, v, &b)) return e;
         if (b) return Bad(n, "echo is not supported");
         return std::nullopt;
       }},
      {"suffix", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         return Bad(n, "suffix is not supported");
       }},
      {"add_special_tokens", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         bool b;
         if (auto e = Bool(n, v, &b)) return e;
         g.set_add_special_tokens(b);
         return std::nullopt;
       }},
  };
  const std::map<std::string, FieldHandler> chat_only = {
      {"messages", [&](const std::string&, const ordered_json& v) {
         has_messages = true;
         return Messages(v, &messages);
       }},
      {"max_completion_tokens", common.at("max_tokens")},
      {"logprobs", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         return Bool(n, v, &chat_logprobs);
       }},
      {"top_logprobs", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (auto e = Integer(n, v, 0, kMaxLogprobs, &x)) return e;
         top_logprobs = x;
         return std::nullopt;
       }},
      {"tools", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (!v.is_array() || v.size() > 128) return Bad(n, "tools must be an array of at most 128 tools");
         tools = v;
         return std::nullopt;
       }},
      {"tool_choice", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null() || v == "auto" || v == "none") return std::nullopt;
         return Bad(n, "tool_choice must be \"auto\" or \"none\" (forced tool calls are not supported)");
       }},
      {"parallel_tool_calls", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         bool b;
         if (v.is_null()) return std::nullopt;
         return Bool(n, v, &b);
       }},
      {"add_generation_prompt", [&](const std::string& n, const ordered_json& v) { return Bool(n, v, &add_generation_prompt); }},
      {"chat_template_kwargs", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (!v.is_object()) return Bad(n, "chat_template_kwargs must be an object");
         if (v.size() > kMaxTemplateKwargs)
           return Bad(n, absl::StrCat("chat_template_kwargs has ", v.size(), " keys; the limit is ", kMaxTemplateKwargs));
         for (const auto& [key, value] : v.items()) {
           if (key == "messages" || key == "tools" || key == "bos_token" || key == "eos_token" ||
               key == "add_generation_prompt")
             return Bad(n, absl::StrCat("chat_template_kwargs may not set ", key));
         }
         template_kwargs = v;
         return std::nullopt;
       }},
  };

  for (const auto& [key, value] : request.items()) {
    const auto& own = chat ? chat_only : completions_only;
    auto it = own.find(key);
    if (it == own.end()) it = common.find(key);
    if (it == common.end()) {
      const std::string shown = key.substr(0, 64);
      return Bad(shown, absl::StrCat("unknown field \"", shown, "\"", chat ? " for /v1/chat/completions" : " for /v1/completions"));
    }
    if (auto e = it->second(key, value)) return e;
  }

  if (!chat && !has_prompt) return Bad("prompt", "prompt is required");
  if (chat && !has_messages) return Bad("messages", "messages is required");
  if (!out->stream && out->include_usage) return Bad("stream_options", "stream_options needs stream: true");
  if (chat) {
    if (top_logprobs && !chat_logprobs) return Bad("top_logprobs", "top_logprobs needs logprobs: true");
    if (chat_logprobs) out->logprobs = static_cast<int>(top_logprobs.value_or(0));
    if (context.chat_template == nullptr) {
      ApiError e = Bad("messages", "this model has no chat template (start the router with --chat-template FILE)");
      return e;
    }
    auto prompt = context.chat_template->Apply(messages, add_generation_prompt, tools, template_kwargs);
    if (!prompt.ok()) return Bad("messages", absl::StrCat("chat template: ", prompt.status().message()));
    g.set_text(*prompt);
    // The template writes the special tokens (BOS) itself.
    g.set_add_special_tokens(false);
  }
  if (structured.output()) *g.mutable_structured_output() = *structured.output();
  if (out->logprobs) {
    g.mutable_logprobs()->set_enabled(true);
    g.mutable_logprobs()->set_top_n(*out->logprobs);
  }
  if (g.session_id().empty() && !context.session_header.empty()) g.set_session_id(context.session_header);
  if (!context.request_id_header.empty()) g.set_request_id(context.request_id_header);
  return std::nullopt;
}

}  // namespace floe::openai
