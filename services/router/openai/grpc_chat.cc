// GenerateRequest.chat (gRPC) rendered as /v1/chat/completions renders a
// chat: its JSON fields become a chat body that ParseFields checks and
// renders (one place resolves every chat), and the rendered prompt, the
// structured output a forced tool choice needs and the decoding the tool
// format needs go into the gRPC request; everything else the client set
// there (sampling, stopping, n, session, ...) stays as it sent it.
#include "absl/strings/str_cat.h"
#include "common/json/bounded_json.h"
#include "services/router/openai/openai_frontend.h"

namespace floe::openai {

using nlohmann::ordered_json;

absl::StatusOr<ResolvedChat> Frontend::ResolveChat(const floe::v1::GenerateRequest& request) const {
  const floe::v1::ChatRequest& chat = request.chat();
  ordered_json body = ordered_json::object();
  auto field = [&](const char* name, const std::string& text) -> absl::Status {
    if (text.empty()) return absl::OkStatus();
    auto parsed = ParseUntrustedJson<ordered_json>(text);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("chat.", name, "_json is not JSON: ", parsed.status().message()));
    body[name] = *std::move(parsed);
    return absl::OkStatus();
  };
  if (chat.messages_json().empty()) return absl::InvalidArgumentError("chat.messages_json is required");
  if (absl::Status s = field("messages", chat.messages_json()); !s.ok()) return s;
  if (absl::Status s = field("tools", chat.tools_json()); !s.ok()) return s;
  if (absl::Status s = field("tool_choice", chat.tool_choice_json()); !s.ok()) return s;
  if (absl::Status s = field("chat_template_kwargs", chat.chat_template_kwargs_json()); !s.ok()) return s;
  if (chat.has_parallel_tool_calls()) body["parallel_tool_calls"] = chat.parallel_tool_calls();
  if (chat.has_add_generation_prompt()) body["add_generation_prompt"] = chat.add_generation_prompt();
  if (!chat.reasoning_effort().empty()) body["reasoning_effort"] = chat.reasoning_effort();

  RequestContext context;
  context.chat_template = chat_template_;
  context.strict_fields = true;  // nothing ignorable can be set here
  ParsedRequest parsed;
  if (auto error = ParseFields(Endpoint::kChat, body, context, &parsed)) {
    const std::string param = error->param.empty() ? "messages" : error->param;
    return absl::InvalidArgumentError(absl::StrCat("chat.", param, ": ", error->message));
  }
  if (parsed.generate.has_structured_output() && request.has_structured_output())
    return absl::InvalidArgumentError(
        "chat.tool_choice: a required or named tool choice constrains the output itself; it cannot be combined "
        "with structured_output");

  ResolvedChat out;
  out.request = request;
  out.request.clear_chat();
  out.request.set_text(parsed.generate.text());
  out.request.set_add_special_tokens(parsed.generate.add_special_tokens());
  if (parsed.generate.has_structured_output())
    *out.request.mutable_structured_output() = parsed.generate.structured_output();
  out.tool_name = parsed.tool_name;
  out.parallel_tool_calls = parsed.parallel_tool_calls;
  out.format = ToolFormat(parsed);
  if (out.format && out.format->keeps_special && !out.request.has_skip_special_tokens())
    out.request.set_skip_special_tokens(false);
  return out;
}

}  // namespace floe::openai
