// The worker's gRPC face: floe.v1.Worker over one Engine.
//
// Generate runs on a gRPC thread: it compiles the request's structured
// output (if any; cached, under a time limit), submits to the engine, then relays the
// engine's outputs (delivered on the engine thread into a per-call queue) to
// the client until the request finishes. A cancelled call or a passed
// deadline aborts the request in the engine, which frees its KV blocks.
//
// The engine (and the suffix cache behind it) keys a request by an id this
// worker makes ("<random instance>-<n>", unique across the workers that
// share a suffix cache); the client's request_id is only a label, echoed in
// its responses and logs, never a key into another request's state. Only
// the Worker.Abort call (an internal, admin one) finds requests by label.
//
// Internal trust (common/auth/internal_trust.h): with a trust that is on,
// Generate, GetLoad and GetModelInfo (every call the router makes) need the
// internal key (UNAUTHENTICATED without it), so a client that skips the
// router cannot probe another tenant's cached prefixes; Abort needs an
// admin key (--admin-key-file), else the internal key. Health (the gRPC
// health service beside this one) stays open.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/auth/api_keys.h"
#include "common/auth/internal_trust.h"
#include "floe/v1/worker.grpc.pb.h"
#include "services/request/resolve_request.h"
#include "services/worker/engine/engine.h"
#include "services/worker/structured/structured_output_compiler.h"
#include "services/worker/worker_metrics.h"

namespace floe {

struct WorkerServiceOptions {
  std::string model_name;
  std::string dtype_name;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  // floe-worker --benchmark-forced-decoding: requests may carry
  // forced_output_ids; without it they are answered FAILED_PRECONDITION.
  bool allow_forced_decoding = false;
  // What a request is resolved against (and GetModelInfo reports).
  RequestLimits limits;
  // Suffix-tree namespace of requests that name none (--speculative-default-namespace).
  std::string default_namespace;
  // Compiles GenerateRequest.structured_output against the model's
  // tokenizer; null (no tokenizer.json in the model folder): such requests
  // are answered FAILED_PRECONDITION.
  std::shared_ptr<StructuredOutputCompiler> structured_output;
};

class WorkerService final : public floe::v1::Worker::Service {
 public:
  // `internal_trust` null or disabled: every call but Abort is open, as
  // before internal trust existed.
  explicit WorkerService(std::shared_ptr<const InternalTrust> internal_trust = nullptr);

  // Until an engine is attached, calls answer UNAVAILABLE ("model loading").
  // Called once; `description` is what GetModelInfo reports.
  void AttachEngine(Engine* engine, WorkerServiceOptions description);
  // Optional; set before serving. Must outlive the service.
  void SetMetrics(WorkerMetrics* metrics) { metrics_ = metrics; }
  // Optional (--admin-key-file); set before serving, must outlive the
  // service. With keys, Abort needs an admin key (without, the internal key
  // when internal trust is on).
  void SetAdminKeys(const ApiKeys* keys) { admin_keys_ = keys; }
  // New Generate calls answer UNAVAILABLE from now on; running ones finish.
  void StartDraining();
  int in_flight() const { return in_flight_.load(); }

  grpc::Status Generate(grpc::ServerContext* context, const floe::v1::GenerateRequest* request,
                        grpc::ServerWriter<floe::v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* context, const floe::v1::AbortRequest* request,
                     floe::v1::AbortResponse* response) override;
  grpc::Status GetLoad(grpc::ServerContext* context, const floe::v1::LoadRequest* request,
                       floe::v1::LoadReport* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const floe::v1::GetModelInfoRequest* request,
                            floe::v1::ModelInfo* response) override;

 private:
  grpc::Status AuthorizeInternal(const grpc::ServerContext& context, std::string_view call) const;
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileStructuredOutput(
      const floe::v1::StructuredOutput& output);

  const std::shared_ptr<const InternalTrust> internal_trust_;  // null: none
  WorkerServiceOptions options_;  // written once, before engine_ is published
  std::atomic<Engine*> engine_{nullptr};
  WorkerMetrics* metrics_ = nullptr;
  const ApiKeys* admin_keys_ = nullptr;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_request_number_{0};
  std::string instance_;  // random, per process: the prefix of engine ids
  std::mutex labels_mu_;
  std::unordered_multimap<std::string, std::string> labels_;  // client label -> engine ids in flight
};

}  // namespace floe
