#include "services/cli/bench/grpc_backend.h"

#include <algorithm>
#include <chrono>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/cli/finish_reason_name.h"

namespace floe::bench {
namespace {

std::chrono::system_clock::time_point DeadlineIn(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

GrpcBackend::GrpcBackend(GrpcBackendOptions options) : options_(std::move(options)) {
  for (int i = 0; i < std::max(1, options_.channels); ++i) {
    grpc::ChannelArguments args;
    args.SetInt("floe.bench_connection", i);  // distinct args: a connection of its own
    args.SetMaxReceiveMessageSize(-1);
    stubs_.push_back(floe::v1::Floe::NewStub(
        grpc::CreateCustomChannel(options_.addr,
                                  options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials(),
                                  args)));
  }
}

absl::StatusOr<floe::v1::ModelInfo> GrpcBackend::GetModelInfo(double timeout_s) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(timeout_s));
  context.set_wait_for_ready(true);  // wait out connection setup, bounded by the deadline
  if (!options_.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options_.api_key);
  floe::v1::GetModelInfoRequest request;
  request.set_model(options_.model);
  floe::v1::ModelInfo info;
  grpc::Status status = stubs_[0]->GetModelInfo(&context, request, &info);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("GetModelInfo on ", options_.addr, ": ", status.error_message()));
  }
  return info;
}

void GrpcBackend::Send(const TurnRequest& request, RequestRecord* record, std::vector<int32_t>* output) {
  floe::v1::GenerateRequest message;
  message.set_model(options_.model);
  message.set_session_id(request.session_id);
  message.mutable_token_ids()->mutable_ids()->Assign(request.prompt.begin(), request.prompt.end());
  message.mutable_sampling()->set_temperature(0);
  message.mutable_stopping()->set_max_tokens(request.max_tokens);
  message.mutable_stopping()->set_ignore_eos(options_.ignore_eos);

  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(options_.timeout_s));
  if (!options_.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options_.api_key);
  auto& stub = stubs_[next_++ % stubs_.size()];
  const auto sent = std::chrono::steady_clock::now();
  auto since_send_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
  };
  auto reader = stub->Generate(&context, message);
  floe::v1::GenerateResponse response;
  bool completed = false;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      const int tokens = response.chunk().token_ids_size();
      const double t = since_send_ms();
      if (tokens > 0 && record->ttft_ms < 0) record->ttft_ms = t;
      record->chunks.push_back({t, tokens});
      record->output_tokens += tokens;
      output->insert(output->end(), response.chunk().token_ids().begin(), response.chunk().token_ids().end());
    } else if (response.has_complete()) {
      const auto& c = response.complete();
      completed = true;
      record->finish_reason = FinishReasonName(c.finish_reason());
      record->usage_prompt_tokens = c.usage().prompt_tokens();
      record->usage_completion_tokens = c.usage().completion_tokens();
      record->usage_cached_tokens = c.usage().cached_prompt_tokens();
    } else if (response.has_error()) {
      record->status_code = response.error().code() != 0 ? response.error().code() : static_cast<int>(grpc::StatusCode::UNKNOWN);
      record->error = response.error().message();
    }
  }
  grpc::Status status = reader->Finish();
  record->e2e_ms = since_send_ms();
  if (!status.ok()) {
    record->status_code = status.error_code();
    record->error = status.error_message();
  } else if (record->status_code == 0 && !completed) {
    record->status_code = static_cast<int>(grpc::StatusCode::INTERNAL);
    record->error = "stream ended without a complete message";
  }
  record->ok = record->status_code == 0;
}

}  // namespace floe::bench
