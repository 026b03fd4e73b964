// The OpenAI-compatible HTTP API: routes /v1/completions,
// /v1/chat/completions (JSON or server-sent events), /v1/models,
// /v1/models/{id}, vLLM's /tokenize and /detokenize, /health and /ready onto
// RouterService (generation through StartGenerate, the path the gRPC API
// takes, so both fronts validate, route, admit and count alike). Chat
// outputs of requests with tools are read for tool calls
// (services/router/tools/): whole responses carry message.tool_calls,
// streams OpenAI's tool_calls deltas. Fields a
// request carries that Floe accepts and ignores are counted
// (floe_http_ignored_fields_total{field}) and logged once per field. Handle runs on the HTTP
// server's I/O threads and never blocks on a worker.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <vector>
#include <string>

#include "common/http/http_server.h"
#include "common/jinja/chat_template.h"
#include "services/router/openai/openai_request.h"
#include "services/router/router_service.h"
#include "services/router/tools/tool_call_stream.h"

namespace floe::openai {

struct FrontendOptions {
  // --strict-fields: fields Floe ignores are refused (400) instead.
  bool strict_fields = false;
  // --tool-call-parser, resolved: how chat outputs with tools are read for
  // calls under tool_choice "auto" (null: not at all, returned as text).
  const tools::ToolCallFormat* tool_call_format = nullptr;
};

class Frontend {
 public:
  // chat_template may be null (chat is then refused with a clear 400).
  // `ready` says whether the router can take requests (for /ready).
  Frontend(RouterService* service, const ChatTemplate* chat_template, std::function<bool()> ready,
           FrontendOptions options = {});

  void Handle(http::Request request, std::shared_ptr<http::Exchange> exchange);
  // A gRPC GenerateRequest.chat rendered as /v1/chat/completions renders a
  // chat (grpc_chat.cc); RouterService's ChatResolver. Thread-safe.
  absl::StatusOr<ResolvedChat> ResolveChat(const floe::v1::GenerateRequest& request) const;

 private:
  void Generate(Endpoint endpoint, const http::Request& request, std::shared_ptr<http::Exchange> exchange);
  // POST /v1/responses (responses_endpoint.cc): translated to a chat request
  // (responses_request.h), answered as responses_stream.h builds it.
  void Responses(const http::Request& request, std::shared_ptr<http::Exchange> exchange);
  void Models(const std::shared_ptr<http::Exchange>& exchange);
  void Model(std::string_view id, const std::shared_ptr<http::Exchange>& exchange);
  void Tokenize(const http::Request& request, const std::shared_ptr<http::Exchange>& exchange);
  void Detokenize(const http::Request& request, const std::shared_ptr<http::Exchange>& exchange);
  // The caller's key and the request's model name: an error to send, or none.
  std::optional<ApiError> Admit(const http::Request& request, const std::string& model) const;
  void ReportIgnored(const std::vector<std::string>& fields);
  const tools::ToolCallFormat* ToolFormat(const ParsedRequest& parsed) const;
  // The reader of a chat output's tool calls (null: none; call ids
  // id_prefix + a unique suffix), with the request's decoding set for the
  // format's markers.
  std::unique_ptr<tools::ToolCallStream> ToolReader(ParsedRequest& parsed, const char* id_prefix) const;
  RequestContext Context(const http::Request& request) const;

  RouterService* service_;
  const ChatTemplate* chat_template_;
  std::function<bool()> ready_;
  FrontendOptions options_;
  std::mutex logged_mu_;
  std::set<std::string> logged_;  // ignored fields logged once (guarded by logged_mu_)
};

// The response to an error, in OpenAI's shape (with Retry-After on 429).
http::Response ErrorResponse(const ApiError& error);

// Ids for responses, items and calls: unique per router process, never a
// client's.
std::string NextId();
int64_t UnixNow();

}  // namespace floe::openai
