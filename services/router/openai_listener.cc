#include "services/router/openai_listener.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "services/router/tools/tool_call_parser.h"

namespace floe {
namespace {

absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadChatTemplate(const OpenAiListenerOptions& o,
                                                               const Tokenizer& tokenizer) {
  namespace fs = std::filesystem;
  const std::string bos = tokenizer.bos_id() ? tokenizer.Decode(std::vector<int32_t>{*tokenizer.bos_id()}, false).value_or("") : "";
  const std::string eos = tokenizer.eos_ids().empty() ? "" : tokenizer.Decode(std::vector<int32_t>{tokenizer.eos_ids()[0]}, false).value_or("");
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file);
    if (!in) return absl::NotFoundError(absl::StrCat("--chat-template: cannot read ", o.chat_template_file));
    std::stringstream source;
    source << in.rdbuf();
    auto loaded = ChatTemplate::FromSource(source.str(), bos, eos);
    if (!loaded.ok()) return loaded.status();
    return std::make_unique<ChatTemplate>(*std::move(loaded));
  }
  fs::path dir = o.tokenizer_path;
  if (!fs::is_directory(dir)) dir = dir.parent_path();
  const fs::path config = dir / "tokenizer_config.json";
  if (!fs::exists(config)) return std::unique_ptr<ChatTemplate>();
  auto loaded = ChatTemplate::FromTokenizerConfig(config.string());
  if (absl::IsNotFound(loaded.status())) return std::unique_ptr<ChatTemplate>();
  if (!loaded.ok()) return loaded.status();
  return std::make_unique<ChatTemplate>(*std::move(loaded));
}

// --tool-call-parser against the served template.
absl::StatusOr<const tools::ToolCallFormat*> ResolveToolParser(const std::string& name, const ChatTemplate* chat) {
  if (name == "none") return nullptr;
  if (name == "auto") {
    const tools::ToolCallFormat* format = chat ? tools::DetectFormat(chat->source()) : nullptr;
    LogEvent(LogLevel::kInfo, "router", "tool_call_parser",
             {{"parser", std::string(format ? format->name : "none")},
              {"why", std::string(!chat ? "no chat template"
                                  : format ? "the chat template writes its marker"
                                           : "the chat template writes no marker of a known format: tool calls "
                                             "come back as text (set --tool-call-parser)")}});
    return format;
  }
  if (const tools::ToolCallFormat* format = tools::FindFormat(name)) {
    LogEvent(LogLevel::kInfo, "router", "tool_call_parser", {{"parser", name}, {"why", std::string("--tool-call-parser")}});
    return format;
  }
  std::string known = "auto, none";
  for (std::string_view f : tools::FormatNames()) absl::StrAppend(&known, ", ", std::string(f));
  return absl::InvalidArgumentError(
      absl::StrCat("--tool-call-parser ", name.substr(0, 64), " is not a known format (one of: ", known, ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAiListener>> OpenAiListener::Start(const OpenAiListenerOptions& o,
                                                                       const Tokenizer& tokenizer,
                                                                       RouterService* service) {
  std::unique_ptr<OpenAiListener> listener(new OpenAiListener());
  auto loaded = LoadChatTemplate(o, tokenizer);
  if (!loaded.ok()) {
    LogEvent(LogLevel::kError, "router", "chat_template_failed", {{"error", std::string(loaded.status().message())}});
    std::fprintf(stderr, "floe-router: chat template: %s\n", std::string(loaded.status().message()).c_str());
    return loaded.status();
  }
  listener->chat_template_ = *std::move(loaded);
  if (!listener->chat_template_)
    LogEvent(LogLevel::kWarning, "router", "no_chat_template", {{"effect", "/v1/chat/completions refused"}});
  auto tool_format = ResolveToolParser(o.tool_call_parser, listener->chat_template_.get());
  if (!tool_format.ok()) {
    std::fprintf(stderr, "floe-router: %s\n", std::string(tool_format.status().message()).c_str());
    return tool_format.status();
  }
  listener->frontend_ = std::make_unique<openai::Frontend>(service, listener->chat_template_.get(), [service] {
    return service->model_info().has_value() && !service->draining();
  }, openai::FrontendOptions{.strict_fields = o.strict_fields, .tool_call_format = *tool_format});
  openai::Frontend* frontend = listener->frontend_.get();
  service->SetChatResolver([frontend](const floe::v1::GenerateRequest& r) { return frontend->ResolveChat(r); });
  if (o.port < 0) return listener;
  http::ServerOptions http_options;
  http_options.host = o.host;
  http_options.port = o.port;
  http_options.threads = o.threads;
  http_options.max_body_bytes = o.max_body_bytes;
  http_options.tls_cert_file = o.tls.cert_file;
  http_options.tls_key_file = o.tls.key_file;
  http_options.tls_client_ca_file = o.tls.client_ca_file;
  auto started = http::Server::Start(http_options, [frontend](http::Request request, std::shared_ptr<http::Exchange> exchange) {
    frontend->Handle(std::move(request), std::move(exchange));
  });
  if (!started.ok()) {
    LogEvent(LogLevel::kError, "router", "http_listen_failed", {{"error", std::string(started.status().message())}});
    return started.status();
  }
  listener->server_ = *std::move(started);
  return listener;
}

}  // namespace floe
