// One client's generation relayed from a worker: the single path behind the
// router's gRPC and HTTP fronts. It waits for an admission slot, picks a
// worker, reads the worker's token stream through a gRPC callback reactor,
// detokenizes incrementally and matches stop strings across chunks, and
// retries on another worker when one fails before sending anything.
//
// No thread is held while a request waits or streams: the front gets each
// worker message's events through Sink::on_events and calls Resume() once it
// has written them, so a slow reader holds back only its own worker stream.
// Sink callbacks run on gRPC or gate threads and must not block; they are
// never concurrent with each other for one call. Resume() and Cancel() may be
// called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/tokenizer/tokenizer.h"
#include "floe/v1/generate.pb.h"
#include "services/router/admission_gate.h"
#include "services/router/router_metrics.h"
#include "services/router/worker_picker.h"
#include "services/router/worker_pool.h"

namespace floe {

// What a call needs from the router; every pointer outlives the calls.
struct RouterParts {
  const Tokenizer* tokenizer = nullptr;
  WorkerPool* pool = nullptr;
  WorkerPicker* picker = nullptr;
  AdmissionGate* gate = nullptr;
  RouterMetrics* metrics = nullptr;  // optional
  std::atomic<int>* in_flight = nullptr;
  int max_retries = 2;
  // Deadline of a worker call when the client set none.
  std::chrono::seconds max_request_time{600};
};

class GenerateCall : public std::enable_shared_from_this<GenerateCall> {
 public:
  struct Sink {
    // The events one worker message produced, in order (a chunk, maybe a
    // completion). Write them, then call Resume() (or Cancel()).
    std::function<void(GenerateCall& call, std::vector<floe::v1::GenerateResponse> events)> on_events;
    // Exactly once, last. OK after a completion event was delivered.
    std::function<void(const grpc::Status&)> on_done;
  };
  // A fresh context for each worker attempt (the gRPC front derives it from
  // its server context so that deadlines and cancellation propagate).
  using MakeContext = std::function<std::shared_ptr<grpc::ClientContext>()>;

  // `request` is already prepared: tokenized, validated, with its id.
  static std::shared_ptr<GenerateCall> Start(const RouterParts& parts, floe::v1::GenerateRequest request,
                                             MakeContext make_context, Sink sink);
  ~GenerateCall();

  void Resume();
  // Ends the call with CANCELLED (unless it already ended); the worker aborts
  // the request and frees its KV.
  void Cancel();

 private:
  class Attempt;
  GenerateCall(const RouterParts& parts, floe::v1::GenerateRequest request, MakeContext make_context, Sink sink);
  void Admitted(absl::Status status);
  void StartAttempt();
  // Worker message -> client events; false when no more should be read.
  bool Relay(Attempt& attempt, const floe::v1::GenerateResponse& in, std::vector<floe::v1::GenerateResponse>* out);
  void AttemptDone(Attempt* attempt, const grpc::Status& status);
  void Finish(const grpc::Status& status);

  const RouterParts parts_;
  const floe::v1::GenerateRequest request_;
  const MakeContext make_context_;
  Sink sink_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();

  std::mutex mu_;
  Attempt* attempt_ = nullptr;  // guarded by mu_
  std::shared_ptr<grpc::ClientContext> attempt_context_;  // guarded by mu_
  bool cancelled_ = false;      // guarded by mu_
  // The attempt's reads: one at a time; once done, its hold is released.
  bool read_pending_ = false;  // guarded by mu_
  bool reading_done_ = false;  // guarded by mu_
  bool admitted_ = false;
  bool finished_ = false;
  // Per attempt (only the reactor thread touches these while it runs).
  bool received_ = false;
  bool complete_ = false;
  grpc::Status relay_error_;
  bool first_token_seen_ = false;
  int completion_tokens_ = 0;
  int attempt_number_ = 0;
  PickRequest pick_;
  grpc::Status last_status_;
};

}  // namespace floe
