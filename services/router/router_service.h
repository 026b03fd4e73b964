// The public floe.v1.Floe API. The router owns the text side of a request:
// it tokenizes prompts and validates what only it can (model name, prompt
// length against the context, stop strings); GenerateCall then relays it from
// a worker. StartGenerate is the one entry both fronts use (this gRPC service
// and the OpenAI HTTP API), so they validate, route and count alike.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/auth/api_keys.h"
#include "common/tokenizer/tokenizer.h"
#include "floe/v1/router.grpc.pb.h"
#include "services/router/admission_gate.h"
#include "services/router/rate_limiter.h"
#include "services/router/generate_call.h"
#include "services/router/tools/tool_call_parser.h"
#include "services/router/router_metrics.h"
#include "services/router/worker_picker.h"
#include "services/router/worker_pool.h"

namespace floe {

// A gRPC chat (GenerateRequest.chat) rendered into a prompt by the chat
// front (openai/: the same rendering as /v1/chat/completions): the request
// to relay, and how its output is read for tool calls (format null: not).
struct ResolvedChat {
  floe::v1::GenerateRequest request;
  const tools::ToolCallFormat* format = nullptr;
  std::string tool_name;  // a named tool_choice
  bool parallel_tool_calls = true;
};
// INVALID_ARGUMENT naming the chat field for a bad chat.
using ChatResolver = std::function<absl::StatusOr<ResolvedChat>(const floe::v1::GenerateRequest&)>;

struct RouterServiceOptions {
  std::string model_name;
  // Attempts on other workers after one fails before sending any token.
  int max_retries = 2;
  // Deadline given to a worker call when the client set none.
  std::chrono::seconds max_request_time{600};
  int max_stop_strings = 16;
  int max_stop_string_bytes = 256;
  // Optional (null: every client is served, as one anonymous tenant).
  // Must outlive the service.
  const ApiKeys* api_keys = nullptr;
  RateLimiter* rate_limiter = nullptr;
};

// Generate and GenerateUnary are raw callback methods: no thread per stream
// (see GenerateCall), and they parse the request themselves, so bytes that
// are not a GenerateRequest get INVALID_ARGUMENT rather than gRPC's bare
// INTERNAL. The short calls stay on the sync server's threads.
class RouterService final
    : public floe::v1::Floe::WithRawCallbackMethod_Generate<
          floe::v1::Floe::WithRawCallbackMethod_GenerateUnary<floe::v1::Floe::Service>> {
 public:
  RouterService(RouterServiceOptions options, const Tokenizer* tokenizer, WorkerPool* pool,
                WorkerPicker* picker, AdmissionGate* gate);

  // Until the model is known (from a worker), Generate answers UNAVAILABLE.
  void SetModelInfo(const floe::v1::ModelInfo& info);
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Optional; set before serving. Must outlive the service.
  void SetMetrics(RouterMetrics* metrics) { metrics_ = metrics; }
  // Optional; set before serving (null: chats are refused FAILED_PRECONDITION).
  void SetChatResolver(ChatResolver resolver) { chat_resolver_ = std::move(resolver); }
  RouterMetrics* metrics() const { return metrics_; }  // null: none
  int in_flight() const { return in_flight_.load(); }
  // The served model, once known.
  std::optional<floe::v1::ModelInfo> model_info() const;

  // Authenticates `authorization` ("Bearer KEY"; ignored without API keys),
  // puts the request in its tenant's namespace and cache salt, validates,
  // prepares and rate-limits it, then starts relaying it; `sink` hears the
  // rest. A refusal (bad key, bad field, unknown model, draining, over the
  // rate) is returned and the sink never called.
  absl::StatusOr<std::shared_ptr<GenerateCall>> StartGenerate(const floe::v1::GenerateRequest& request,
                                                              std::string_view authorization,
                                                              GenerateCall::MakeContext make_context,
                                                              GenerateCall::Sink sink);
  // The caller's tenant (null without API keys); UNAUTHENTICATED otherwise.
  absl::StatusOr<const Tenant*> Authenticate(std::string_view authorization) const;
  // OK when `model` is empty or the served model's name; NOT_FOUND naming
  // both otherwise (INVALID_ARGUMENT past the name's bound).
  grpc::Status CheckModel(const std::string& model) const;
  // The served tokenizer (the HTTP front formats logprob tokens with it).
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // Serialized floe.v1.GenerateRequest in; GenerateResponse messages out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  // Serialized GenerateRequest in; a serialized GenerateResult out.
  grpc::ServerUnaryReactor* GenerateUnary(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* result) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const floe::v1::TokenizeRequest* request,
                        floe::v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const floe::v1::DetokenizeRequest* request,
                          floe::v1::DetokenizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context, const floe::v1::ListModelsRequest* request,
                          floe::v1::ListModelsResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const floe::v1::GetModelInfoRequest* request,
                            floe::v1::ModelInfo* response) override;

 private:
  absl::StatusOr<floe::v1::GenerateRequest> Check(const floe::v1::GenerateRequest& request) const;
  absl::StatusOr<floe::v1::GenerateRequest> Prepare(const floe::v1::GenerateRequest& request) const;
  bool model_known() const;

  RouterServiceOptions options_;  // model_name guarded by model_mu_
  const Tokenizer* tokenizer_;
  ChatResolver chat_resolver_;
  WorkerPool* pool_;
  WorkerPicker* picker_;
  AdmissionGate* gate_;
  RouterMetrics* metrics_ = nullptr;
  mutable std::mutex model_mu_;
  floe::v1::ModelInfo model_info_;  // guarded by model_mu_
  bool model_known_ = false;        // guarded by model_mu_
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  mutable std::atomic<uint64_t> next_request_number_{0};
};

}  // namespace floe
