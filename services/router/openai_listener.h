// The router's OpenAI-compatible HTTP listener (--http-port): the chat
// template (--chat-template FILE, else tokenizer_config.json beside the
// tokenizer; none is not an error, chat is then refused per request), the
// tool-call format (--tool-call-parser; auto picks it from the template's
// markers and logs its choice), the openai::Frontend over the
// RouterService, and the http::Server it serves on (TLS as the gRPC
// port's). The frontend also renders gRPC chats (GenerateRequest.chat) for
// the RouterService, with or without an HTTP port (port < 0: none).
//
// Thread: Start and Shutdown from main's thread; the frontend runs on the
// HTTP server's I/O threads.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http/http_server.h"
#include "common/jinja/chat_template.h"
#include "common/rpc/tls.h"
#include "services/router/openai/openai_frontend.h"
#include "services/router/router_service.h"

namespace floe {

struct OpenAiListenerOptions {
  std::string host;
  int port = 0;  // < 0: no HTTP server (gRPC chats are still rendered)
  int threads = 2;
  size_t max_body_bytes = 4 << 20;
  TlsOptions tls;
  std::string chat_template_file;  // empty: tokenizer_config.json beside `tokenizer_path`
  std::string tokenizer_path;
  bool strict_fields = false;  // --strict-fields
  std::string tool_call_parser = "auto";  // --tool-call-parser
};

class OpenAiListener {
 public:
  // Failures are logged ("chat_template_failed", "http_listen_failed") and
  // returned; the router then exits 1. `service` must outlive the listener.
  static absl::StatusOr<std::unique_ptr<OpenAiListener>> Start(const OpenAiListenerOptions& options,
                                                               const Tokenizer& tokenizer, RouterService* service);
  // Empty without an HTTP server.
  std::string address() const { return server_ ? server_->address() : ""; }
  void Shutdown() {
    if (server_) server_->Shutdown();
  }

 private:
  OpenAiListener() = default;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<openai::Frontend> frontend_;
  std::unique_ptr<http::Server> server_;  // last: stops before the frontend goes
};

}  // namespace floe
