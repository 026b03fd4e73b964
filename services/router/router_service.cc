#include "services/router/router_service.h"

#include <random>

#include "common/tokenizer/utf8.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/rpc/status_conversion.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/stop_string_matcher.h"
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

grpc::Status RouterService::Serve(grpc::ServerContext* context, const GenerateRequest& request, const Emit& emit) {
  if (!metrics_) return ServeOnce(context, request, emit);
  const auto start = std::chrono::steady_clock::now();
  bool first = true;
  grpc::Status status = ServeOnce(context, request, [&](const GenerateResponse& response) {
    if (first && response.has_chunk() && response.chunk().token_ids_size() > 0) {
      metrics_->ObserveFirstToken(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      first = false;
    }
    return emit(response);
  });
  metrics_->ObserveFinished(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
  return status;
}

grpc::Status RouterService::ServeOnce(grpc::ServerContext* context, const GenerateRequest& request, const Emit& emit) {
  if (draining_.load()) return Error(grpc::StatusCode::UNAVAILABLE, "router is draining");
  if (absl::Status s = CheckRequestStrings(request); !s.ok()) return ToGrpcStatus(s);
  if (!model_known()) return Error(grpc::StatusCode::UNAVAILABLE, "no worker has reported its model yet");
  if (grpc::Status s = CheckModel(request.model()); !s.ok()) return s;
  absl::StatusOr<GenerateRequest> prepared = Prepare(request);
  if (!prepared.ok()) return ToGrpcStatus(prepared.status());
  const GenerateRequest& worker_request = *prepared;
  const std::string& id = worker_request.request_id();

  if (absl::Status admitted = gate_->Enter(); !admitted.ok()) return ToGrpcStatus(admitted);
  in_flight_.fetch_add(1);
  struct Exit {
    RouterService* self;
    ~Exit() {
      self->in_flight_.fetch_sub(1);
      self->gate_->Leave();
    }
  } exit{this};

  const int prompt_tokens = worker_request.token_ids().ids_size();
  std::vector<std::string> stops(request.stopping().stop().begin(), request.stopping().stop().end());
  PickRequest pick{request.session_id(), {}};
  grpc::Status last_status;
  for (int attempt = 0; attempt <= options_.max_retries; ++attempt) {
    WorkerState* worker = picker_->Pick(pick);
    if (!worker) {
      if (attempt == 0) return Error(grpc::StatusCode::UNAVAILABLE, "no healthy worker");
      break;
    }
    worker->outstanding.fetch_add(1);
    struct Outstanding {
      WorkerState* w;
      ~Outstanding() { w->outstanding.fetch_sub(1); }
    } outstanding{worker};

    std::unique_ptr<grpc::ClientContext> call = grpc::ClientContext::FromServerContext(*context);
    call->set_deadline(std::min(context->deadline(), std::chrono::system_clock::now() + options_.max_request_time));
    auto reader = worker->stub->Generate(call.get(), worker_request);
    IncrementalDetokenizer detokenizer(tokenizer_, /*skip_special_tokens=*/true);
    StopStringMatcher matcher(stops);
    GenerateResponse in;
    bool received = false, done = false;
    int completion_tokens = 0;
    while (!done && reader->Read(&in)) {
      received = true;
      GenerateResponse out;
      out.set_request_id(id);
      if (in.has_chunk()) {
        completion_tokens += in.chunk().token_ids_size();
        auto text = detokenizer.Add(in.chunk().token_ids());
        if (!text.ok()) {
          call->TryCancel();
          return ToGrpcStatus(text.status());
        }
        StopStringMatcher::Result matched = matcher.Consume(*text);
        *out.mutable_chunk() = in.chunk();
        out.mutable_chunk()->set_text(matched.text);
        if (!emit(out)) {  // client gone
          call->TryCancel();
          return Error(grpc::StatusCode::CANCELLED, "client went away");
        }
        if (matched.stopped) {
          call->TryCancel();  // the worker aborts and frees the request's KV
          GenerateResponse complete;
          complete.set_request_id(id);
          complete.mutable_complete()->set_finish_reason(floe::v1::FINISH_REASON_STOP);
          complete.mutable_complete()->set_stop_reason(matched.matched);
          complete.mutable_complete()->mutable_usage()->set_prompt_tokens(prompt_tokens);
          complete.mutable_complete()->mutable_usage()->set_completion_tokens(completion_tokens);
          emit(complete);
          reader->Finish();
          return grpc::Status::OK;
        }
      } else if (in.has_complete()) {
        StopStringMatcher::Result tail = matcher.Consume(detokenizer.Finish());
        std::string text = tail.text + (tail.stopped ? "" : matcher.Flush());
        if (!text.empty()) {
          out.mutable_chunk()->set_text(text);
          emit(out);
          out.clear_chunk();
        }
        *out.mutable_complete() = in.complete();
        if (tail.stopped) {
          out.mutable_complete()->set_finish_reason(floe::v1::FINISH_REASON_STOP);
          out.mutable_complete()->set_stop_reason(tail.matched);
        }
        emit(out);
        done = true;
      }
    }
    grpc::Status status = reader->Finish();
    if (done) return grpc::Status::OK;
    last_status = status;
    if (context->IsCancelled()) return Error(grpc::StatusCode::CANCELLED, "client cancelled");
    // Retry elsewhere only if nothing reached the client and the worker itself failed.
    const bool worker_failed = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                               (status.ok() && !received);
    if (received || !worker_failed) return status.ok() ? Error(grpc::StatusCode::INTERNAL, "worker ended the stream early") : status;
    pool_->ReportFailure(worker);
    pick.exclude.push_back(worker);
    if (metrics_) metrics_->ObserveRetry();
    LogEvent(LogLevel::kWarning, "router", "retry_on_other_worker",
             {{"request_id", id}, {"worker", worker->address}, {"error", status.error_message()}});
  }
  return last_status.ok() ? Error(grpc::StatusCode::UNAVAILABLE, "no healthy worker") : last_status;
}

grpc::Status RouterService::Generate(grpc::ServerContext* context, const GenerateRequest* request,
                                     grpc::ServerWriter<GenerateResponse>* writer) {
  return Serve(context, *request, [writer](const GenerateResponse& response) { return writer->Write(response); });
}

grpc::Status RouterService::GenerateUnary(grpc::ServerContext* context, const GenerateRequest* request,
                                          floe::v1::GenerateResult* result) {
  grpc::Status status = Serve(context, *request, [result](const GenerateResponse& response) {
    result->set_request_id(response.request_id());
    if (response.has_chunk()) {
      result->mutable_token_ids()->MergeFrom(response.chunk().token_ids());
      result->mutable_text()->append(response.chunk().text());
      result->mutable_logprobs()->MergeFrom(response.chunk().logprobs());
    } else if (response.has_complete()) {
      *result->mutable_complete() = response.complete();
    }
    return true;
  });
  return status;
}

grpc::Status RouterService::Tokenize(grpc::ServerContext*, const floe::v1::TokenizeRequest* request,
                                     floe::v1::TokenizeResponse* response) {
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  auto ids = tokenizer_->Encode(request->text(), request->add_special_tokens());
  if (!ids.ok()) return ToGrpcStatus(ids.status());
  response->mutable_ids()->Assign(ids->begin(), ids->end());
  return grpc::Status::OK;
}

grpc::Status RouterService::Detokenize(grpc::ServerContext*, const floe::v1::DetokenizeRequest* request,
                                       floe::v1::DetokenizeResponse* response) {
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  auto text = tokenizer_->Decode(ids, request->skip_special_tokens());
  if (!text.ok()) return ToGrpcStatus(text.status());
  response->set_text(*text);
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
