#include "common/jinja/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

using nlohmann::ordered_json;

// A special token as tokenizer_config.json writes it: a string, an
// AddedToken object with "content", or null.
std::string TokenText(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}


}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(std::string source, std::string bos_token,
                                                      std::string eos_token) {
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("chat template: ", parsed.status().message()));
  ordered_json tokens = ordered_json::object();
  if (!bos_token.empty()) tokens["bos_token"] = std::move(bos_token);
  if (!eos_token.empty()) tokens["eos_token"] = std::move(eos_token);
  return ChatTemplate(std::move(source), *std::move(parsed), std::move(tokens));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  const ordered_json config = ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  if (!config.contains("chat_template") || config["chat_template"].is_null())
    return absl::NotFoundError(absl::StrCat(path, " has no chat_template"));
  const ordered_json& chat = config["chat_template"];
  std::string source;
  if (chat.is_string()) {
    source = chat.get<std::string>();
  } else if (chat.is_array()) {
    bool found = false;
    for (const auto& entry : chat) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        source = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) return absl::NotFoundError(absl::StrCat(path, ": chat_template has no \"default\" entry"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template must be a string or a list"));
  }
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": chat template: ", parsed.status().message()));
  // transformers' special_tokens_map: the tokens that are set.
  ordered_json tokens = ordered_json::object();
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    std::string token = TokenText(config[name]);
    if (!token.empty()) tokens[name] = std::move(token);
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    ordered_json extra = ordered_json::array();
    for (const auto& t : config["additional_special_tokens"]) extra.push_back(TokenText(t));
    if (!extra.empty()) tokens["additional_special_tokens"] = std::move(extra);
  }
  return ChatTemplate(std::move(source), *std::move(parsed), std::move(tokens));
}

absl::StatusOr<std::string> ChatTemplate::Apply(const ordered_json& messages, bool add_generation_prompt,
                                                const ordered_json& tools, const ordered_json& extra) const {
  if (!tools.is_null() && !tools.is_array()) return absl::InvalidArgumentError("tools must be null or an array");
  if (!extra.is_null() && !extra.is_object()) return absl::InvalidArgumentError("extra must be null or an object");
  ordered_json context = ordered_json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [k, v] : special_tokens_.items()) context[k] = v;
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) {
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
        return absl::InvalidArgumentError(absl::StrCat("extra variable '", k, "' is an argument of its own"));
      context[k] = v;
    }
  }
  auto rendered = template_.Render(context);
  if (!rendered.ok()) return absl::InvalidArgumentError(absl::StrCat("chat template: ", rendered.status().message()));
  return rendered;
}

}  // namespace floe
