// A Hugging Face chat template (tokenizer_config.json's chat_template),
// rendered as transformers' apply_chat_template renders it: the template
// sees messages, tools (None when not given), documents (None),
// add_generation_prompt, the tokenizer's special tokens that are set
// (bos_token, eos_token...), and the caller's extra variables on top.
// Parsed once at load: a template outside the supported Jinja subset fails
// to load (InvalidArgument), never renders differently from transformers.
// Immutable after construction; Apply is thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/jinja/template.h"

namespace floe {

class ChatTemplate {
 public:
  // Reads chat_template (a string, or a list of {"name","template"} whose
  // "default" is taken) and the special tokens: bos_token, eos_token,
  // unk_token, sep_token, pad_token, cls_token, mask_token (a string, an
  // object with "content", or null) and additional_special_tokens.
  // NotFound when the file has no chat_template.
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(const std::string& path);
  // An empty token is left out of the variables, as transformers leaves out
  // a token the tokenizer does not have.
  static absl::StatusOr<ChatTemplate> FromSource(std::string source, std::string bos_token, std::string eos_token);

  // messages: JSON array of OpenAI-style {"role","content",...} objects
  // (content may be null; tool_calls etc. pass through). tools: null or an
  // array. extra: null or an object of further variables, e.g.
  // {"enable_thinking": false}; it may override special tokens but not
  // messages, tools, documents or add_generation_prompt (InvalidArgument).
  // A template error (raise_exception, a type error) is InvalidArgument
  // with jinja2's message.
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                    const nlohmann::ordered_json& tools = nullptr,
                                    const nlohmann::ordered_json& extra = nullptr) const;
  const std::string& source() const { return source_; }
  // vLLM's chat content format: true ("openai") where the template loops
  // over a message's content, so content reaches it as a list of
  // {"type": "text", "text": ...} parts; false ("string"): as one string.
  bool content_as_parts() const { return template_.loops_over_content(); }

 private:
  ChatTemplate(std::string source, jinja::Template parsed, nlohmann::ordered_json special_tokens)
      : source_(std::move(source)), template_(std::move(parsed)), special_tokens_(std::move(special_tokens)) {}

  std::string source_;
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_;  // name -> text, only those set
};

}  // namespace floe
