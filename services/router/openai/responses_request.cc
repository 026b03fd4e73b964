#include "services/router/openai/responses_request.h"

#include "absl/strings/str_cat.h"
#include "services/router/openai/json_readers.h"

namespace floe::openai {
namespace {

using nlohmann::ordered_json;

// What Floe accepts and ignores on /v1/responses, with the only values it
// takes where a value would change the answer.
bool Ignorable(const std::string& name) {
  static const char* const kNames[] = {"store",           "metadata",          "include",
                                       "truncation",      "user",              "service_tier",
                                       "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
                                       "prompt_cache_options", "context_management", "top_logprobs",
                                       "max_tool_calls",  "background"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

std::optional<ApiError> CheckIgnorable(const std::string& name, const ordered_json& v) {
  if (name == "store" && v.is_boolean() && v.get<bool>())
    return Bad(name, "store: true is not supported: Floe keeps no responses (send store: false)");
  if (name == "background" && v.is_boolean() && v.get<bool>())
    return Bad(name, "background: true is not supported (send background: false)");
  if (name == "truncation" && !v.is_null() && v != "disabled")
    return Bad(name, "truncation must be \"disabled\": a prompt over the context is refused, not cut");
  if (name == "top_logprobs" && !v.is_null() && v != 0)
    return Bad(name, "top_logprobs is not supported on /v1/responses (use /v1/chat/completions)");
  return std::nullopt;
}

// A Responses function tool, flat, as chat's nested tool.
std::optional<ApiError> Tool(const std::string& at, const ordered_json& tool, ordered_json* out) {
  if (!tool.is_object() || !tool.contains("type") || !tool["type"].is_string())
    return Bad(at, absl::StrCat(at, " must be an object with a \"type\""));
  const std::string& type = tool["type"].get_ref<const std::string&>();
  if (type != "function")
    return Bad(at + ".type", absl::StrCat(at, ".type is \"", type.substr(0, 64),
                                          "\"; only function tools are supported (built-in tools run on OpenAI)"));
  ordered_json function = ordered_json::object();
  for (const auto& [key, value] : tool.items()) {
    if (key == "type") continue;
    if (key == "name" || key == "description" || key == "parameters" || key == "strict") {
      if (!value.is_null()) function[key] = value;
      continue;
    }
    return Bad(at + "." + key.substr(0, 64), absl::StrCat("unknown field ", at, ".", key.substr(0, 64)));
  }
  *out = {{"type", "function"}, {"function", std::move(function)}};
  return std::nullopt;
}

std::optional<ApiError> ToolChoice(const ordered_json& v, ordered_json* out) {
  if (v.is_string()) {
    *out = v;
    return std::nullopt;
  }
  if (v.is_object() && v.value("type", "") == "function" && v.contains("name")) {
    *out = {{"type", "function"}, {"function", {{"name", v["name"]}}}};
    return std::nullopt;
  }
  return Bad("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                            "\"name\": ...}");
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", ...}}.
std::optional<ApiError> TextFormat(const ordered_json& v, ordered_json* chat) {
  if (!v.is_object()) return Bad("text", "text must be an object");
  for (const auto& [key, value] : v.items()) {
    if (key == "verbosity") continue;  // changes nothing Floe generates
    if (key != "format") return Bad("text." + key.substr(0, 64), absl::StrCat("unknown field text.", key.substr(0, 64)));
    if (!value.is_object() || !value.contains("type") || !value["type"].is_string())
      return Bad("text.format", "text.format must be an object with a \"type\"");
    const std::string& type = value["type"].get_ref<const std::string&>();
    if (type == "text") continue;
    if (type == "json_object") {
      (*chat)["response_format"] = {{"type", "json_object"}};
      continue;
    }
    if (type != "json_schema")
      return Bad("text.format.type", absl::StrCat("text.format.type is \"", type.substr(0, 64),
                                                  "\"; expected text, json_object or json_schema"));
    ordered_json schema = ordered_json::object();
    for (const auto& [k, x] : value.items())
      if (k != "type") schema[k] = x;  // name, schema, strict, description: chat's json_schema
    (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  }
  return std::nullopt;
}

// One input item's content as chat content: a string or text parts as they
// are (chat accepts input_text and output_text parts).
ordered_json ItemContent(const ordered_json& item) {
  return item.contains("content") && !item["content"].is_null() ? item["content"] : ordered_json("");
}

std::optional<ApiError> Input(const ordered_json& v, ordered_json* messages) {
  if (v.is_string()) {
    messages->push_back({{"role", "user"}, {"content", v}});
    return std::nullopt;
  }
  if (!v.is_array() || v.empty()) return Bad("input", "input must be a string or a non-empty array of items");
  for (size_t i = 0; i < v.size(); ++i) {
    const ordered_json& item = v[i];
    const std::string at = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return Bad(at, absl::StrCat(at, " must be an object"));
    const std::string type = item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>()
                             : item.contains("role")                          ? "message"
                                                                              : "";
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string())
        return Bad(at + ".role", absl::StrCat(at, ".role must be a string"));
      messages->push_back({{"role", item["role"]}, {"content", ItemContent(item)}});
      continue;
    }
    if (type == "function_call") {
      for (const char* key : {"call_id", "name"})
        if (!item.contains(key) || !item[key].is_string())
          return Bad(absl::StrCat(at, ".", key), absl::StrCat(at, ".", key, " must be a string"));
      const ordered_json arguments = item.contains("arguments") ? item["arguments"] : ordered_json("{}");
      ordered_json call = {{"id", item["call_id"]},
                           {"type", "function"},
                           {"function", {{"name", item["name"]}, {"arguments", arguments}}}};
      // Calls made in one turn are one assistant message, with the text that
      // came just before them.
      if (!messages->empty() && messages->back()["role"] == "assistant") {
        ordered_json& last = messages->back();
        if (!last.contains("tool_calls")) last["tool_calls"] = ordered_json::array();
        last["tool_calls"].push_back(std::move(call));
      } else {
        messages->push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {std::move(call)}}});
      }
      continue;
    }
    if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        return Bad(at + ".call_id", absl::StrCat(at, ".call_id must be a string"));
      const bool has_output = item.contains("output") && !item["output"].is_null();
      messages->push_back(
          {{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", has_output ? item["output"] : ordered_json("")}});
      continue;
    }
    if (type == "reasoning") continue;  // Floe writes none; a client's copy changes no prompt
    return Bad(at + ".type", absl::StrCat(at, ".type is \"", type.substr(0, 64),
                                          "\"; expected message, function_call or function_call_output"));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseResponsesRequest(const ordered_json& body, bool strict_fields, ResponsesRequest* out) {
  if (!body.is_object()) return Bad("", "the request body must be a JSON object");
  ordered_json& chat = out->chat;
  chat = ordered_json::object();
  ordered_json messages = ordered_json::array();
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string()) return Bad("instructions", "instructions must be a string");
    out->instructions = body["instructions"];
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  bool has_input = false;
  for (const auto& [name, value] : body.items()) {
    if (value.is_null()) continue;  // as OpenAI: null is the default
    if (name == "instructions") continue;
    // Floe's and vLLM's sampling extras pass through to chat, which checks them.
    if (name == "model" || name == "stream" || name == "temperature" || name == "top_p" ||
        name == "parallel_tool_calls" || name == "seed" || name == "top_k" || name == "skip_special_tokens" ||
        name == "forced_output_ids") {
      chat[name] = value;
      if (name == "temperature") out->temperature = value;
      if (name == "top_p") out->top_p = value;
      if (name == "parallel_tool_calls" && value.is_boolean()) out->parallel_tool_calls = value.get<bool>();
      continue;
    }
    if (name == "input") {
      if (auto e = Input(value, &messages)) return e;
      has_input = true;
      continue;
    }
    if (name == "max_output_tokens") {
      chat["max_tokens"] = value;
      out->max_output_tokens = value;
      continue;
    }
    if (name == "tools") {
      if (!value.is_array()) return Bad("tools", "tools must be an array");
      ordered_json tools = ordered_json::array();
      for (size_t i = 0; i < value.size(); ++i) {
        ordered_json tool;
        if (auto e = Tool(absl::StrCat("tools[", i, "]"), value[i], &tool)) return e;
        tools.push_back(std::move(tool));
      }
      out->tools = value;
      if (!tools.empty()) chat["tools"] = std::move(tools);
      continue;
    }
    if (name == "tool_choice") {
      ordered_json choice;
      if (auto e = ToolChoice(value, &choice)) return e;
      chat["tool_choice"] = std::move(choice);
      out->tool_choice = value;
      continue;
    }
    if (name == "text") {
      if (auto e = TextFormat(value, &chat)) return e;
      out->text = value;
      continue;
    }
    if (name == "reasoning") {
      if (!value.is_object()) return Bad("reasoning", "reasoning must be an object");
      if (value.contains("effort") && !value["effort"].is_null()) chat["reasoning_effort"] = value["effort"];
      continue;
    }
    if (name == "previous_response_id" || name == "conversation")
      return Bad(name, absl::StrCat(name, " is not supported: Floe keeps no responses; send the whole history in "
                                          "input (store: false)"));
    if (name == "prompt") return Bad(name, "prompt (a stored prompt template) is not supported; send input");
    if (Ignorable(name)) {
      if (auto e = CheckIgnorable(name, value)) return e;
      if (strict_fields)
        return Bad(name, absl::StrCat(name, " is ignored by Floe and refused under --strict-fields"));
      out->ignored.push_back(name);
      continue;
    }
    return Bad(name.substr(0, 64), absl::StrCat("unknown field ", name.substr(0, 64)));
  }
  if (!has_input) return Bad("input", "input is required");
  if (chat.contains("tools") && !chat.contains("tool_choice")) chat["tool_choice"] = "auto";
  chat["messages"] = std::move(messages);
  return std::nullopt;
}

ApiError AsResponsesError(ApiError error) {
  auto rename = [&](const std::string& from, const std::string& to) {
    if (error.param.compare(0, from.size(), from) != 0) return false;
    error.param = to + error.param.substr(from.size());
    return true;
  };
  if (error.param.compare(0, 8, "messages") == 0) {
    error.message = absl::StrCat("input (as chat messages): ", error.message);
    error.param = "input";
  } else if (!rename("max_tokens", "max_output_tokens") && !rename("response_format", "text.format")) {
    rename("reasoning_effort", "reasoning.effort");
  }
  return error;
}

}  // namespace floe::openai
