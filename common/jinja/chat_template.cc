#include "common/jinja/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

using nlohmann::ordered_json;

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
  return ChatTemplate(std::move(source), *std::move(parsed), std::move(bos_token), std::move(eos_token));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  const ordered_json config = ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  if (!config.contains("chat_template") || config["chat_template"].is_null())
    return absl::NotFoundError(absl::StrCat(path, " has no chat_template"));
  const ordered_json& chat = config["chat_template"];
  std::string source;
  if (chat.is_string()) {
    source = chat.get<std::string>();
  } else if (chat.is_array()) {
    for (const auto& entry : chat)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        source = entry["template"].get<std::string>();
    if (source.empty()) return absl::NotFoundError(absl::StrCat(path, ": chat_template has no \"default\" entry"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template must be a string or a list"));
  }
  auto loaded = FromSource(std::move(source), config.contains("bos_token") ? TokenText(config["bos_token"]) : "",
                           config.contains("eos_token") ? TokenText(config["eos_token"]) : "");
  if (!loaded.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", loaded.status().message()));
  return loaded;
}

absl::StatusOr<std::string> ChatTemplate::Apply(const ordered_json& messages, bool add_generation_prompt,
                                                const ordered_json& tools, const ordered_json& extra) const {
  ordered_json context = ordered_json::object();
  context["messages"] = messages;
  if (!tools.is_null()) context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_;
  context["eos_token"] = eos_;
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) context[k] = v;
  return template_.Render(context);
}

}  // namespace floe
