// The OpenAI-compatible HTTP API: routes /v1/completions,
// /v1/chat/completions (JSON or server-sent events), /v1/models, /health and
// /ready onto RouterService::StartGenerate, the path the gRPC API takes, so
// both fronts validate, route, admit and count alike. Handle runs on the HTTP
// server's I/O threads and never blocks on a worker.
#pragma once

#include <memory>
#include <string>

#include "common/http/http_server.h"
#include "common/jinja/chat_template.h"
#include "services/router/openai/openai_request.h"
#include "services/router/router_service.h"

namespace floe::openai {

class Frontend {
 public:
  // chat_template may be null (chat is then refused with a clear 400).
  // `ready` says whether the router can take requests (for /ready).
  Frontend(RouterService* service, const ChatTemplate* chat_template, std::function<bool()> ready);

  void Handle(http::Request request, std::shared_ptr<http::Exchange> exchange);

 private:
  void Generate(Endpoint endpoint, const http::Request& request, std::shared_ptr<http::Exchange> exchange);
  void Models(const std::shared_ptr<http::Exchange>& exchange);

  RouterService* service_;
  const ChatTemplate* chat_template_;
  std::function<bool()> ready_;
};

// The response to an error, in OpenAI's shape (with Retry-After on 429).
http::Response ErrorResponse(const ApiError& error);

}  // namespace floe::openai
