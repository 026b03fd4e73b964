// A Hugging Face chat template (tokenizer_config.json's chat_template),
// rendered as transformers' apply_chat_template does: messages,
// add_generation_prompt, bos_token, eos_token, tools when given, and any
// extra variables. Parsed once at load; a template outside the supported
// Jinja subset fails to load. Thread-safe after construction.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/jinja/template.h"

namespace floe {

class ChatTemplate {
 public:
  // Reads chat_template (a string, or a list of {"name","template"} whose
  // "default" is taken), bos_token and eos_token (a string, an object with
  // "content", or null). NotFound when the file has no chat_template.
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(const std::string& path);
  static absl::StatusOr<ChatTemplate> FromSource(std::string source, std::string bos_token, std::string eos_token);

  // messages: OpenAI-style message objects; tools: null or an array; extra:
  // null or an object of further variables (e.g. {"enable_thinking": false}).
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const nlohmann::ordered_json& tools = nullptr,
                                    const nlohmann::ordered_json& extra = nullptr) const;
  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, jinja::Template parsed, std::string bos, std::string eos)
      : source_(std::move(source)), template_(std::move(parsed)), bos_(std::move(bos)), eos_(std::move(eos)) {}

  std::string source_;
  jinja::Template template_;
  std::string bos_, eos_;
};

}  // namespace floe
