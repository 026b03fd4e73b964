#include "services/router/router_service.h"

#include <deque>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/auth/grpc_auth.h"
#include "common/log/log.h"
#include "common/rpc/status_conversion.h"
#include "services/router/chat_tool_calls.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/stop_string_matcher.h"
#include "common/tokenizer/utf8.h"
#include "services/request/resolve_request.h"

namespace floe {
namespace {

using floe::v1::GenerateRequest;
using floe::v1::GenerateResponse;

grpc::Status Error(grpc::StatusCode code, std::string message) { return grpc::Status(code, std::move(message)); }

}  // namespace

RouterService::RouterService(RouterServiceOptions options, const Tokenizer* tokenizer, WorkerPool* pool,
                             WorkerPicker* picker, AdmissionGate* gate)
    : options_(std::move(options)), tokenizer_(tokenizer), pool_(pool), picker_(picker), gate_(gate) {}

void RouterService::SetModelInfo(const floe::v1::ModelInfo& info) {
  std::lock_guard<std::mutex> lock(model_mu_);
  model_info_ = info;
  // Without --model-name the router serves the model under the workers' name.
  if (options_.model_name.empty()) options_.model_name = info.name();
  model_info_.set_name(options_.model_name);
  model_known_ = true;
}

bool RouterService::model_known() const {
  std::lock_guard<std::mutex> lock(model_mu_);
  return model_known_;
}

grpc::Status RouterService::CheckModel(const std::string& model) const {
  // Never echo an unbounded name back.
  if (model.size() > static_cast<size_t>(kMaxModelNameBytes))
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("model has ", model.size(), " bytes; the limit is ", kMaxModelNameBytes));
  std::lock_guard<std::mutex> lock(model_mu_);
  if (!model.empty() && model != options_.model_name)
    return Error(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("model \"", model, "\" is not served here (serving \"", options_.model_name, "\")"));
  return grpc::Status::OK;
}

absl::StatusOr<GenerateRequest> RouterService::Prepare(const GenerateRequest& request) const {
  if (absl::Status s = CheckRequestStrings(request); !s.ok()) return s;
  GenerateRequest out = request;
  RequestLimits limits;
  {
    std::lock_guard<std::mutex> lock(model_mu_);
    limits = LimitsOf(model_info_);
  }
  if (request.prompt_case() == GenerateRequest::kText) {
    if (request.text().empty()) return absl::InvalidArgumentError("prompt is empty: text has no characters");
    auto encoded = tokenizer_->Encode(request.text(), !request.has_add_special_tokens() || request.add_special_tokens());
    if (!encoded.ok())
      return absl::InvalidArgumentError(absl::StrCat("prompt text: ", encoded.status().message()));
    out.mutable_token_ids()->mutable_ids()->Assign(encoded->begin(), encoded->end());
  }
  if (absl::Status s = ResolveRequest(limits, out); !s.ok()) return s;
  const auto& stopping = request.stopping();
  if (stopping.stop_size() > options_.max_stop_strings)
    return absl::InvalidArgumentError(absl::StrCat("stopping.stop has ", stopping.stop_size(),
                                                   " strings; the limit is ", options_.max_stop_strings));
  for (int i = 0; i < stopping.stop_size(); ++i) {
    const std::string& stop = stopping.stop(i);
    if (stop.empty() || static_cast<int>(stop.size()) > options_.max_stop_string_bytes)
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop strings must have 1..",
                                                     options_.max_stop_string_bytes, " bytes"));
    // A stop string is matched against decoded text, which is valid UTF-8:
    // an invalid one could never match.
    if (const size_t bad = utf8::FindInvalid(stop); bad != stop.size())
      return absl::InvalidArgumentError(absl::StrCat("stopping.stop[", i, "] is not valid UTF-8 (byte offset ", bad, ")"));
  }
  if (out.request_id().empty()) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    out.set_request_id(absl::StrCat("req-", next_request_number_.fetch_add(1), "-", rng() % 1000000000));
  }
  return out;
}

std::optional<floe::v1::ModelInfo> RouterService::model_info() const {
  std::lock_guard<std::mutex> lock(model_mu_);
  if (!model_known_) return std::nullopt;
  return model_info_;
}

absl::StatusOr<GenerateRequest> RouterService::Check(const GenerateRequest& request) const {
  if (draining_.load()) return absl::UnavailableError("router is draining");
  if (absl::Status s = CheckRequestStrings(request); !s.ok()) return s;
  if (!model_known()) return absl::UnavailableError("no worker has reported its model yet");
  if (grpc::Status s = CheckModel(request.model()); !s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return Prepare(request);
}

absl::StatusOr<const Tenant*> RouterService::Authenticate(std::string_view authorization) const {
  if (!options_.api_keys) return nullptr;
  return options_.api_keys->Authenticate(authorization);
}

namespace {

// A tenant's requests live in its own suffix-cache namespace and prefix-cache
// salt; what the client asked for only subdivides them.
void ApplyTenant(const Tenant& tenant, GenerateRequest& request) {
  const std::string& ns = request.speculation().namespace_();
  request.mutable_speculation()->set_namespace_(ns.empty() ? tenant.name : absl::StrCat(tenant.name, "/", ns));
  const std::string& salt = request.cache_salt();
  request.set_cache_salt(salt.empty() ? tenant.name : absl::StrCat(tenant.name, "/", salt));
}

std::string_view Metadata(const grpc::ServerContextBase* context, const char* key) { return CallMetadata(*context, key); }

}  // namespace

absl::StatusOr<std::shared_ptr<GenerateCall>> RouterService::StartGenerate(const GenerateRequest& request,
                                                                           std::string_view authorization,
                                                                           GenerateCall::MakeContext make_context,
                                                                           GenerateCall::Sink sink) {
  auto refuse = [&](const absl::Status& status) {
    if (metrics_) metrics_->ObserveFinished(absl::StatusCodeToString(status.code()));
    return status;
  };
  auto tenant = Authenticate(authorization);
  if (!tenant.ok()) return refuse(tenant.status());
  // A chat is rendered into a prompt first (after the key: rendering costs).
  std::optional<ResolvedChat> chat;
  if (request.has_chat()) {
    if (request.prompt_case() != GenerateRequest::PROMPT_NOT_SET)
      return refuse(absl::InvalidArgumentError("chat is set beside a text or token_ids prompt: set one of them"));
    if (!chat_resolver_)
      return refuse(absl::FailedPreconditionError("chat: this router serves no chat template"));
    auto resolved = chat_resolver_(request);
    if (!resolved.ok()) return refuse(resolved.status());
    chat = *std::move(resolved);
  }
  const GenerateRequest& source = chat ? chat->request : request;
  absl::StatusOr<GenerateRequest> prepared;
  if (*tenant) {
    if (absl::Status s = CheckRequestStrings(source); !s.ok()) return refuse(s);
    GenerateRequest owned = source;
    ApplyTenant(**tenant, owned);
    prepared = Check(owned);
  } else {
    prepared = Check(source);
  }
  if (!prepared.ok()) return refuse(prepared.status());
  if (options_.rate_limiter) {
    const int64_t cost = prepared->token_ids().ids_size() + prepared->stopping().max_tokens();
    if (absl::Status s = options_.rate_limiter->Charge(*tenant ? (*tenant)->name : "", cost); !s.ok())
      return refuse(s);
  }
  RouterParts parts;
  parts.tokenizer = tokenizer_;
  parts.pool = pool_;
  parts.picker = picker_;
  parts.gate = gate_;
  parts.metrics = metrics_;
  parts.in_flight = &in_flight_;
  parts.max_retries = options_.max_retries;
  parts.max_request_time = options_.max_request_time;
  if (chat && chat->format)
    sink = WithToolCalls(std::move(sink), *chat->format, chat->tool_name, chat->parallel_tool_calls,
                         std::max(1, prepared->n()));
  return GenerateCall::Start(parts, *std::move(prepared), std::move(make_context), std::move(sink));
}

namespace {

// Starts a call for a gRPC front: the caller's API key from its metadata,
// and each worker call derived from its context, so that the client's
// deadline and cancellation reach the worker.
absl::StatusOr<std::shared_ptr<GenerateCall>> StartFromGrpc(RouterService* service,
                                                            grpc::CallbackServerContext* context,
                                                            const GenerateRequest& request, GenerateCall::Sink sink) {
  return service->StartGenerate(
      request, CallMetadata(*context, "authorization"),
      [context]() -> std::shared_ptr<grpc::ClientContext> { return grpc::ClientContext::FromServerContext(*context); },
      std::move(sink));
}

// The streaming gRPC front of one call. Holds no thread: GenerateCall hands
// it each worker message's events, it writes them one at a time, and only
// once they are all written asks the call for more (Resume), so a slow
// client holds back only its own worker stream. Deleted by gRPC (OnDone)
// after Finish, which waits for the call's on_done: after it the call never
// touches the reactor again.
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Starts the call; a refusal finishes the RPC with its status at once.
  static GenerateReactor* Start(RouterService* service, grpc::CallbackServerContext* context,
                                const GenerateRequest& request) {
    auto* reactor = new GenerateReactor();
    GenerateCall::Sink sink;
    sink.on_events = [reactor](GenerateCall& call, std::vector<GenerateResponse> events) {
      reactor->OnEvents(call, std::move(events));
    };
    sink.on_done = [reactor](const grpc::Status& status) { reactor->OnCallDone(status); };
    auto call = StartFromGrpc(service, context, request, std::move(sink));
    if (!call.ok()) {
      reactor->Finish(ToGrpcStatus(call.status()));
      return reactor;
    }
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(reactor->mu_);
      reactor->call_ = *call;
      cancel = reactor->client_gone_;
    }
    if (cancel) (*call)->Cancel();
    return reactor;
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client is gone: nothing more reaches it
      pending_.clear();
      if (done_) {  // the call already ended while this write was in flight
        done_ = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        FinishLocked(lock);
        return;
      }
      LoseClient(lock);  // the call's on_done then finishes the RPC
      return;
    }
    if (!pending_.empty()) {
      WriteNext(lock);
    } else if (done_) {
      FinishLocked(lock);
    } else {
      std::shared_ptr<GenerateCall> call = call_;
      lock.unlock();
      call->Resume();
    }
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(mu_);
    LoseClient(lock);
  }

  void OnDone() override { delete this; }

 private:
  GenerateReactor() = default;

  void OnEvents(GenerateCall& call, std::vector<GenerateResponse> events) {
    std::unique_lock<std::mutex> lock(mu_);
    // The first events may come before Start has stored the call.
    if (!call_) call_ = call.shared_from_this();
    if (client_gone_) return;  // Cancel() was or is being called: on_done follows
    for (auto& event : events) pending_.push_back(std::move(event));
    if (writing_) return;  // cannot happen (one message at a time), but harmless
    if (pending_.empty()) {
      lock.unlock();
      call.Resume();
      return;
    }
    WriteNext(lock);
  }

  void OnCallDone(const grpc::Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    done_ = client_gone_ ? grpc::Status(grpc::StatusCode::CANCELLED, "client went away") : status;
    if (!writing_) FinishLocked(lock);
  }

  void WriteNext(std::unique_lock<std::mutex>& lock) {
    writing_ = true;
    const GenerateResponse next = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    current_.Clear();
    bool own_buffer = false;
    grpc::SerializationTraits<GenerateResponse>::Serialize(next, &current_, &own_buffer);
    StartWrite(&current_);
  }

  // Cancels the call once (its on_done then finishes the RPC).
  void LoseClient(std::unique_lock<std::mutex>& lock) {
    const bool first = !client_gone_;
    client_gone_ = true;
    std::shared_ptr<GenerateCall> call = call_;
    lock.unlock();
    if (first && call) call->Cancel();
  }

  void FinishLocked(std::unique_lock<std::mutex>& lock) {
    if (finished_) return;
    finished_ = true;
    const grpc::Status status = *done_;
    lock.unlock();
    Finish(status);
  }

  std::mutex mu_;
  std::shared_ptr<GenerateCall> call_;   // guarded by mu_
  std::deque<GenerateResponse> pending_;  // guarded by mu_
  grpc::ByteBuffer current_;              // the write in flight
  bool writing_ = false;                  // guarded by mu_
  bool client_gone_ = false;              // guarded by mu_
  bool finished_ = false;                 // guarded by mu_
  std::optional<grpc::Status> done_;      // guarded by mu_
};

// A stream refused before it started.
class RefusedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  void OnDone() override { delete this; }
};

// The unary front: collects the stream into one result.
class GenerateUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  static GenerateUnaryReactor* Start(RouterService* service, grpc::CallbackServerContext* context,
                                     const GenerateRequest& request, grpc::ByteBuffer* response) {
    auto* reactor = new GenerateUnaryReactor();
    floe::v1::GenerateResult* result = &reactor->result_;
    GenerateCall::Sink sink;
    sink.on_events = [result](GenerateCall& call, std::vector<GenerateResponse> events) {
      for (const GenerateResponse& response : events) {
        result->set_request_id(response.request_id());
        const int index = response.has_chunk() ? response.chunk().index() : response.complete().index();
        if (index < 0 || index > kMaxN) continue;
        while (result->choices_size() <= index) result->add_choices()->set_index(result->choices_size() - 1);
        floe::v1::Choice& choice = *result->mutable_choices(index);
        if (response.has_chunk()) {
          choice.mutable_token_ids()->MergeFrom(response.chunk().token_ids());
          choice.mutable_text()->append(response.chunk().text());
          choice.mutable_logprobs()->MergeFrom(response.chunk().logprobs());
          for (const floe::v1::ToolCallDelta& d : response.chunk().tool_calls()) {
            while (choice.tool_calls_size() <= d.index()) choice.add_tool_calls();
            floe::v1::ToolCall& call = *choice.mutable_tool_calls(d.index());
            if (!d.id().empty()) call.set_id(d.id());
            if (!d.name().empty()) call.set_name(d.name());
            call.mutable_arguments()->append(d.arguments());
          }
        } else if (response.has_complete()) {
          *choice.mutable_complete() = response.complete();
        }
      }
      call.Resume();
    };
    sink.on_done = [reactor, response](const grpc::Status& status) {
      floe::v1::GenerateResult& r = reactor->result_;
      if (status.ok() && r.choices_size() > 0) {
        // Choice 0 at the top, as before n existed.
        const floe::v1::Choice& first = r.choices(0);
        *r.mutable_token_ids() = first.token_ids();
        r.set_text(first.text());
        *r.mutable_complete() = first.complete();
        *r.mutable_logprobs() = first.logprobs();
        *r.mutable_tool_calls() = first.tool_calls();
      }
      if (status.ok()) {
        bool own_buffer = false;
        grpc::SerializationTraits<floe::v1::GenerateResult>::Serialize(r, response, &own_buffer);
      }
      reactor->Finish(status);
    };
    // A client that goes away cancels the worker call (StartFromGrpc); the
    // call then ends and on_done finishes the RPC.
    auto call = StartFromGrpc(service, context, request, std::move(sink));
    if (!call.ok()) {
      reactor->Finish(ToGrpcStatus(call.status()));
    } else {
      std::lock_guard<std::mutex> lock(reactor->mu_);
      reactor->call_ = *std::move(call);
    }
    return reactor;
  }

  void OnCancel() override {
    std::shared_ptr<GenerateCall> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      call = call_;
    }
    if (call) call->Cancel();
  }
  void OnDone() override { delete this; }

 private:
  GenerateUnaryReactor() = default;
  std::mutex mu_;
  std::shared_ptr<GenerateCall> call_;  // guarded by mu_; keeps the call alive
  floe::v1::GenerateResult result_;     // written by the call's (serial) sink only
};

// The request, or INVALID_ARGUMENT for bytes that do not parse as one.
absl::StatusOr<GenerateRequest> ParseRequest(const grpc::ByteBuffer& bytes) {
  grpc::ByteBuffer copy(bytes);  // Deserialize consumes its buffer; this shares the slices
  GenerateRequest request;
  if (!grpc::SerializationTraits<GenerateRequest>::Deserialize(&copy, &request).ok())
    return absl::InvalidArgumentError("the request is not a valid floe.v1.GenerateRequest message");
  return request;
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* RouterService::Generate(grpc::CallbackServerContext* context,
                                                                    const grpc::ByteBuffer* bytes) {
  auto request = ParseRequest(*bytes);
  if (!request.ok()) {
    if (metrics_) metrics_->ObserveFinished(absl::StatusCodeToString(request.status().code()));
    auto* reactor = new RefusedStream();
    reactor->Finish(ToGrpcStatus(request.status()));
    return reactor;
  }
  return GenerateReactor::Start(this, context, *request);
}

grpc::ServerUnaryReactor* RouterService::GenerateUnary(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* bytes, grpc::ByteBuffer* result) {
  auto request = ParseRequest(*bytes);
  if (!request.ok()) {
    if (metrics_) metrics_->ObserveFinished(absl::StatusCodeToString(request.status().code()));
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(request.status()));
    return reactor;
  }
  return GenerateUnaryReactor::Start(this, context, *request, result);
}

grpc::Status RouterService::Tokenize(grpc::ServerContext* context, const floe::v1::TokenizeRequest* request,
                                     floe::v1::TokenizeResponse* response) {
  if (auto tenant = Authenticate(Metadata(context, "authorization")); !tenant.ok()) return ToGrpcStatus(tenant.status());
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  auto ids = tokenizer_->Encode(request->text(), request->add_special_tokens());
  if (!ids.ok()) return ToGrpcStatus(ids.status());
  response->mutable_ids()->Assign(ids->begin(), ids->end());
  return grpc::Status::OK;
}

grpc::Status RouterService::Detokenize(grpc::ServerContext* context, const floe::v1::DetokenizeRequest* request,
                                       floe::v1::DetokenizeResponse* response) {
  if (auto tenant = Authenticate(Metadata(context, "authorization")); !tenant.ok()) return ToGrpcStatus(tenant.status());
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  // Bounded by name, so a client learns which field and what limit rather
  // than gRPC's bare "Sent message larger than max". 262,144 ids hold any
  // real context; the text must fit the reply under the router's default
  // --max-message-bytes (4 MiB; the reply's framing takes at most 6 bytes).
  constexpr int kMaxIds = 1 << 18;
  constexpr size_t kMaxTextBytes = (4u << 20) - 64;
  if (request->ids_size() > kMaxIds)
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("ids has ", request->ids_size(), " ids; the limit is ", kMaxIds));
  std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  auto text = tokenizer_->Decode(ids, request->skip_special_tokens());
  if (!text.ok()) return ToGrpcStatus(text.status());
  if (text->size() > kMaxTextBytes)
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("ids decode to ", text->size(), " bytes of text; the reply's limit is ", kMaxTextBytes,
                              " (send fewer ids)"));
  response->set_text(*std::move(text));
  return grpc::Status::OK;
}

grpc::Status RouterService::ListModels(grpc::ServerContext*, const floe::v1::ListModelsRequest*,
                                       floe::v1::ListModelsResponse* response) {
  std::lock_guard<std::mutex> lock(model_mu_);
  if (model_known_) *response->add_models() = model_info_;
  return grpc::Status::OK;
}

grpc::Status RouterService::GetModelInfo(grpc::ServerContext*, const floe::v1::GetModelInfoRequest* request,
                                         floe::v1::ModelInfo* response) {
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(model_mu_);
  if (!model_known_) return Error(grpc::StatusCode::UNAVAILABLE, "no worker has reported its model yet");
  *response = model_info_;
  return grpc::Status::OK;
}

}  // namespace floe
