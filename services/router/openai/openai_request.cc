#include "services/router/openai/openai_request.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jinja/chat_template.h"
#include "common/json/bounded_json.h"
#include "services/request/resolve_request.h"
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
constexpr size_t kMaxTools = 128;
constexpr size_t kMaxForcedIds = 4096;
constexpr size_t kMaxToolNameBytes = 64;

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

// OpenAI's message content (a string, null, or text parts) as vLLM hands
// it to the template: the text parts, each {"type": "text", "text": ...}
// (a string is one part, null none; parts of type input_text, output_text,
// refusal and thinking are text too, as vLLM reads them; a text part whose
// text is null is skipped), then, unless `as_parts`, joined with "\n".
std::optional<ApiError> Content(const std::string& name, const ordered_json& v, bool as_parts, ordered_json* out) {
  std::vector<std::string> texts;
  if (v.is_string()) {
    texts.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      const ordered_json& part = v[i];
      const std::string at = absl::StrCat(name, "[", i, "]");
      if (part.is_string()) {
        texts.push_back(part.get<std::string>());
        continue;
      }
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        return Bad(at, absl::StrCat(at, " must be an object with a \"type\""));
      const std::string& type = part["type"].get_ref<const std::string&>();
      if (type != "text" && type != "input_text" && type != "output_text" && type != "refusal" && type != "thinking")
        return Bad(at, absl::StrCat(at, " has type \"", type.substr(0, 64), "\"; only text parts are supported"));
      const char* field = type == "refusal" ? "refusal" : type == "thinking" ? "thinking" : "text";
      if (!part.contains(field) || part[field].is_null()) continue;  // vLLM skips an empty part
      if (!part[field].is_string()) return Bad(at, absl::StrCat(at, ".", field, " must be a string"));
      texts.push_back(part[field].get<std::string>());
    }
  } else if (!v.is_null()) {
    return Bad(name, absl::StrCat(name, " must be a string, null or an array of text parts"));
  }
  if (as_parts) {
    *out = ordered_json::array();
    for (std::string& t : texts) out->push_back({{"type", "text"}, {"text", std::move(t)}});
    return std::nullopt;
  }
  *out = absl::StrJoin(texts, "\n");
  return std::nullopt;
}

// An assistant message's tool_calls as vLLM passes them on: an empty list
// dropped; each entry an object of type "function" (or no type) with a
// "function" object, whose "arguments" string is parsed into the object
// templates iterate (null, "" or JSON that is not an object: {}).
std::optional<ApiError> ToolCalls(const std::string& name, const ordered_json& v, ordered_json* message) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_array()) return Bad(name, absl::StrCat(name, " must be an array"));
  if (v.empty()) return std::nullopt;
  ordered_json calls = v;
  for (size_t i = 0; i < calls.size(); ++i) {
    ordered_json& call = calls[i];
    const std::string at = absl::StrCat(name, "[", i, "]");
    if (!call.is_object()) return Bad(at, absl::StrCat(at, " must be an object"));
    if (call.contains("type") && call["type"] != "function")
      return Bad(at + ".type", absl::StrCat(at, ".type must be \"function\""));
    if (!call.contains("function") || !call["function"].is_object())
      return Bad(at + ".function", absl::StrCat(at, ".function must be an object"));
    ordered_json& function = call["function"];
    ordered_json parsed = ordered_json::object();
    if (function.contains("arguments")) {
      const ordered_json& arguments = function["arguments"];
      if (arguments.is_object()) {
        parsed = arguments;
      } else if (arguments.is_string() && !arguments.get_ref<const std::string&>().empty()) {
        // Bounded like the body; a malformed string in a history is {} (as
        // vLLM: failing would fail every later turn of the conversation).
        auto decoded = ParseUntrustedJson(arguments.get_ref<const std::string&>());
        if (decoded.ok() && decoded->is_object()) parsed = *std::move(decoded);
      } else if (!arguments.is_null() && !arguments.is_string()) {
        return Bad(at + ".function.arguments", absl::StrCat(at, ".function.arguments must be a JSON string or an object"));
      }
    }
    function["arguments"] = std::move(parsed);
  }
  (*message)["tool_calls"] = std::move(calls);
  return std::nullopt;
}

// The history as vLLM's chat handling passes it to the template
// (docs/openai-api.md, "Histories"): content per content_as_parts (a tool
// message's always a string), tool-call arguments as objects, `reasoning`
// also as `reasoning_content`; every other key in the client's order.
std::optional<ApiError> Messages(const ordered_json& v, bool content_as_parts, ordered_json* out) {
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
    ordered_json content;
    if (auto e = Content(at + ".content", m.contains("content") ? m["content"] : ordered_json(nullptr),
                         content_as_parts && role != "tool", &content))
      return e;
    message["content"] = std::move(content);
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content") continue;
      if (key == "tool_calls") {
        if (role != "assistant") continue;  // vLLM reads them on assistant turns only
        if (auto e = ToolCalls(at + ".tool_calls", value, &message)) return e;
        continue;
      }
      if (key == "name" || key == "tool_call_id" || key == "reasoning_content" || key == "reasoning" ||
          key == "thinking" || key == "refusal") {
        message[key] = value;  // no deeper than the parse allowed
        continue;
      }
      return Bad(at + "." + key.substr(0, 64), absl::StrCat("unknown field ", at, ".", key.substr(0, 64)));
    }
    // vLLM passes `reasoning` as reasoning_content too (templates read that).
    if (message.contains("reasoning") && !message.contains("reasoning_content"))
      message["reasoning_content"] = message["reasoning"];
    out->push_back(std::move(message));
  }
  return std::nullopt;
}

// OpenAI's function tools: each {"type": "function", "function": {"name",
// "description"?, "parameters"? (an object), "strict"?}}, names unique.
std::optional<ApiError> Tools(const std::string& n, const ordered_json& v) {
  if (!v.is_array() || v.size() > kMaxTools)
    return Bad(n, absl::StrCat("tools must be an array of at most ", kMaxTools, " tools"));
  std::set<std::string> names;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = absl::StrCat(n, "[", i, "]");
    const ordered_json& tool = v[i];
    if (!tool.is_object() || tool.value("type", "function") != "function" || !tool.contains("function") ||
        !tool["function"].is_object())
      return Bad(at, absl::StrCat(at, " must be {\"type\": \"function\", \"function\": {...}}"));
    const ordered_json& f = tool["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get_ref<const std::string&>().empty() ||
        f["name"].get_ref<const std::string&>().size() > kMaxToolNameBytes)
      return Bad(at + ".function.name",
                 absl::StrCat(at, ".function.name must be a string of 1 to ", kMaxToolNameBytes, " bytes"));
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      return Bad(at + ".function.parameters", absl::StrCat(at, ".function.parameters must be a JSON Schema object"));
    if (!names.insert(f["name"].get<std::string>()).second)
      return Bad(at + ".function.name", absl::StrCat(at, ".function.name \"", f["name"].get<std::string>(),
                                                     "\" is given twice"));
  }
  return std::nullopt;
}

ordered_json ToolParameters(const ordered_json& function) {
  if (function.contains("parameters") && function["parameters"].is_object()) return function["parameters"];
  return {{"type", "object"}};
}

// tool_choice onto ParsedRequest: "required" and a named function constrain
// the output (a JSON array of calls, or the function's arguments) through
// the structured-output engine, as vLLM does; they cannot be combined with
// another constraint.
std::optional<ApiError> ApplyToolChoice(const ordered_json& tools, const std::string& choice, const std::string& name,
                                        bool constrained, ParsedRequest* out) {
  const bool has_tools = tools.is_array() && !tools.empty();
  if (choice == "none" || (!has_tools && choice == "auto")) return std::nullopt;
  if (!has_tools) return Bad("tool_choice", absl::StrCat("tool_choice \"", choice, "\" needs tools"));
  if (choice == "auto") {
    out->tool_choice = ParsedRequest::ToolChoice::kAuto;
    return std::nullopt;
  }
  if (constrained)
    return Bad("tool_choice", "tool_choice \"required\" or a named function constrains the output; it cannot be "
                              "combined with response_format, structured_outputs or guided_*");
  ordered_json schema;
  if (choice == "named") {
    for (const ordered_json& tool : tools) {
      if (tool["function"]["name"] == name) schema = ToolParameters(tool["function"]);
    }
    if (schema.is_null())
      return Bad("tool_choice", absl::StrCat("tool_choice names \"", name, "\", which is not among the tools"));
    out->tool_choice = ParsedRequest::ToolChoice::kNamed;
    out->tool_name = name;
  } else {
    ordered_json any_of = ordered_json::array();
    for (const ordered_json& tool : tools) {
      ordered_json call = ordered_json::object();
      call["type"] = "object";
      call["properties"] = {{"name", {{"const", tool["function"]["name"]}}},
                            {"parameters", ToolParameters(tool["function"])}};
      call["required"] = {"name", "parameters"};
      call["additionalProperties"] = false;
      any_of.push_back(std::move(call));
    }
    schema = ordered_json::object();
    schema["type"] = "array";
    schema["items"] = {{"anyOf", std::move(any_of)}};
    schema["minItems"] = 1;
    if (!out->parallel_tool_calls) schema["maxItems"] = 1;
    out->tool_choice = ParsedRequest::ToolChoice::kRequired;
  }
  auto* structured = out->generate.mutable_structured_output();
  structured->set_json_schema(schema.dump());
  return std::nullopt;
}

// Values of ignored fields that would ask for something Floe does not do
// are refused rather than ignored.
std::optional<ApiError> CheckIgnoredValue(const std::string& name, const ordered_json& v) {
  if (name == "modalities") {
    if (v.is_null() || (v.is_array() && v.size() == 1 && v[0] == "text")) return std::nullopt;
    return Bad(name, "modalities: only [\"text\"] is served");
  }
  if (name == "use_beam_search" && !v.is_null() && v != false) return Bad(name, "beam search is not supported");
  return std::nullopt;
}

}  // namespace

const IgnoredField* FindIgnoredField(std::string_view name, Endpoint endpoint) {
  // Each changes nothing Floe generates for the request; what would is
  // served or refused by name instead.
  static const IgnoredField kFields[] = {
      {"store", "OpenAI stores completions for its dashboard; Floe keeps none"},
      {"metadata", "tags for OpenAI's stored completions"},
      {"service_tier", "OpenAI's processing tier; Floe has one"},
      {"prompt_cache_key", "OpenAI's prompt cache routing; Floe routes by session_id and prefix"},
      {"prompt_cache_retention", "OpenAI's prompt cache lifetime"},
      {"safety_identifier", "OpenAI's abuse-monitoring id"},
      {"verbosity", "a hint to OpenAI's GPT-5 models"},
      {"prediction", "OpenAI's predicted outputs"},
      {"modalities", "only [\"text\"] is accepted"},
      {"priority", "vLLM's priority scheduling; Floe schedules first come, first served"},
      {"kv_transfer_params", "vLLM's disaggregated-prefill parameters"},
      {"mm_processor_kwargs", "vLLM's multimodal processor options"},
      {"vllm_xargs", "vLLM's extension arguments"},
      {"use_beam_search", "only false is accepted"},
      {"length_penalty", "a beam-search parameter"},
  };
  static const IgnoredField kCompletionsOnly[] = {
      {"reasoning_effort", "a chat template variable; completions have no template"},
  };
  for (const IgnoredField& f : kFields)
    if (name == f.name) return &f;
  if (endpoint == Endpoint::kCompletions) {
    for (const IgnoredField& f : kCompletionsOnly)
      if (name == f.name) return &f;
  }
  return nullptr;
}

json ErrorJson(const ApiError& e) {
  json error = {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return {{"error", error}};
}

std::optional<ApiError> ParseBody(const std::string& body, ordered_json* out) {
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
  if (!parsed->is_object()) return Bad("", "the request body must be a JSON object");
  *out = *std::move(parsed);
  return std::nullopt;
}

std::optional<ApiError> Parse(Endpoint endpoint, const std::string& body, const RequestContext& context,
                              ParsedRequest* out) {
  ordered_json request;
  if (auto e = ParseBody(body, &request)) return e;
  return ParseFields(endpoint, request, context, out);
}

std::optional<ApiError> ParseFields(Endpoint endpoint, const ordered_json& request, const RequestContext& context,
                                    ParsedRequest* out) {
  const bool chat = endpoint == Endpoint::kChat;
  out->endpoint = endpoint;
  floe::v1::GenerateRequest& g = out->generate;
  auto* sampling = g.mutable_sampling();
  auto* stopping = g.mutable_stopping();

  bool has_prompt = false, has_messages = false;
  ordered_json messages, tools = nullptr, template_kwargs = nullptr;
  bool add_generation_prompt = true;
  std::optional<std::string> reasoning_effort;
  std::string tool_choice = "auto", tool_name;
  bool chat_logprobs = false;
  std::optional<int64_t> top_logprobs;

  // One handler per field; a field not in the table is unknown.
  using FieldHandler = std::function<std::optional<ApiError>(const std::string&, const ordered_json&)>;
  StructuredOutputFields structured;
  std::map<std::string, FieldHandler> common = {
      {"prompt_logprobs", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         int64_t x;
         if (auto e = Integer(n, v, 0, kMaxLogprobs, &x)) return e;
         out->prompt_logprobs = static_cast<int>(x);
         return std::nullopt;
       }},
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
         if (auto e = Integer(n, v, 1, kMaxN, &x)) return e;
         g.set_n(static_cast<int32_t>(x));
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
      // Floe's benchmark mode: the tokens the worker emits instead of
      // sampling (a worker without --benchmark-forced-decoding refuses it).
      {"forced_output_ids", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (!v.is_array() || v.size() > kMaxForcedIds)
           return Bad(n, absl::StrCat(n, " must be an array of at most ", kMaxForcedIds, " token ids"));
         floe::v1::TokenIds ids;
         if (auto e = TokenIdList(n, v, &ids)) return e;
         g.mutable_forced_output_ids()->Assign(ids.ids().begin(), ids.ids().end());
         return std::nullopt;
       }},
      {"return_token_ids", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         return Bool(n, v, &out->return_token_ids);
       }},
      // OpenAI's: {"token id": bias}, biases in [-100, 100], at most 300.
      {"logit_bias", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (!v.is_object() || v.size() > static_cast<size_t>(kMaxLogitBias))
           return Bad(n, absl::StrCat("logit_bias must be an object of at most ", kMaxLogitBias,
                                      " \"token id\": bias entries"));
         for (const auto& [key, bias] : v.items()) {
           int32_t id = -1;
           const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
           if (ec != std::errc() || end != key.data() + key.size() || id < 0)
             return Bad(n, absl::StrCat("logit_bias key \"", key.substr(0, 32), "\" is not a token id"));
           double x;
           if (auto e = Number(absl::StrCat(n, "[", id, "]"), bias, -100, 100, &x)) return Bad(n, e->message);
           (*sampling->mutable_logit_bias())[id] = static_cast<float>(x);
         }
         return std::nullopt;
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
         if (v.is_null()) return std::nullopt;
         return Bool(n, v, &out->echo);
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
         return Messages(v, context.chat_template != nullptr && context.chat_template->content_as_parts(), &messages);
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
         if (auto e = Tools(n, v)) return e;
         tools = v;
         return std::nullopt;
       }},
      {"tool_choice", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (v == "auto" || v == "none" || v == "required") {
           tool_choice = v.get<std::string>();
           return std::nullopt;
         }
         if (v.is_object() && v.value("type", "") == "function" && v.contains("function") &&
             v["function"].is_object() && v["function"].contains("name") && v["function"]["name"].is_string()) {
           tool_choice = "named";
           tool_name = v["function"]["name"].get<std::string>().substr(0, 256);
           return std::nullopt;
         }
         return Bad(n, "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}");
       }},
      {"parallel_tool_calls", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         return Bool(n, v, &out->parallel_tool_calls);
       }},
      {"add_generation_prompt", [&](const std::string& n, const ordered_json& v) { return Bool(n, v, &add_generation_prompt); }},
      // OpenAI's reasoning models' knob; templates that read it (gpt-oss)
      // get it as a variable, the others never see it.
      {"reasoning_effort", [&](const std::string& n, const ordered_json& v) -> std::optional<ApiError> {
         if (v.is_null()) return std::nullopt;
         if (!v.is_string() || v.get_ref<const std::string&>().size() > 16)
           return Bad(n, "reasoning_effort must be a string of at most 16 bytes (minimal, low, medium or high)");
         reasoning_effort = v.get<std::string>();
         return std::nullopt;
       }},
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
      if (const IgnoredField* ignored = FindIgnoredField(key, endpoint)) {
        if (context.strict_fields)
          return Bad(shown, absl::StrCat("field \"", shown, "\" is not used by Floe (", ignored->why,
                                         "); it is refused under --strict-fields"));
        if (auto e = CheckIgnoredValue(key, value)) return e;
        out->ignored_fields.push_back(ignored->name);
        continue;
      }
      return Bad(shown, absl::StrCat("unknown field \"", shown, "\"", chat ? " for /v1/chat/completions" : " for /v1/completions"));
    }
    if (auto e = it->second(key, value)) return e;
  }

  if (chat) {
    if (auto e = ApplyToolChoice(tools, tool_choice, tool_name, structured.output().has_value(), out)) return e;
  }
  if (!chat && !has_prompt) return Bad("prompt", "prompt is required");
  // echo with logprobs: the prompt's tokens come first in the logprobs too
  // (OpenAI's legacy completions), so their logprobs are computed.
  if (out->prompt_logprobs) g.mutable_logprobs()->set_prompt_top_n(*out->prompt_logprobs);
  if (out->echo && out->logprobs && !out->prompt_logprobs) g.mutable_logprobs()->set_prompt_top_n(*out->logprobs);
  if (chat && !has_messages) return Bad("messages", "messages is required");
  if (!out->stream && out->include_usage) return Bad("stream_options", "stream_options needs stream: true");
  if (chat) {
    if (top_logprobs && !chat_logprobs) return Bad("top_logprobs", "top_logprobs needs logprobs: true");
    if (chat_logprobs) out->logprobs = static_cast<int>(top_logprobs.value_or(0));
    if (context.chat_template == nullptr) {
      ApiError e = Bad("messages", "this model has no chat template (start the router with --chat-template FILE)");
      return e;
    }
    if (reasoning_effort) {
      if (template_kwargs.is_null()) template_kwargs = ordered_json::object();
      if (!template_kwargs.contains("reasoning_effort")) template_kwargs["reasoning_effort"] = *reasoning_effort;
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
