// The engine as a service: EngineCore on its own thread, fed through a bounded
// inbox. Submit/Abort/Load may be called from any thread; outputs are
// delivered on the engine thread through each request's sink.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/engine/engine_core.h"

namespace floe {

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      std::unique_ptr<Backend> backend, EngineOptions options,
      std::vector<std::unique_ptr<Proposer>> proposers = {});
  ~Engine();  // Stop()s

  // Queues a resolved request (EngineCore::Add says what that means).
  // RESOURCE_EXHAUSTED when the waiting queue is at its bound, UNAVAILABLE
  // once stopping. The sink is not called when Submit fails.
  absl::Status Submit(EngineRequest request);
  // Aborts a live request; its sink receives a final kAbort output.
  void Abort(const std::string& request_id);
  EngineLoad Load() const;
  EngineCounters Counters() const;
  const ModelConfig& model_config() const { return core_->model_config(); }
  int max_model_len() const { return core_->max_model_len(); }
  // Fixed after Create (which may measure the step cost curve into them).
  const EngineOptions& options() const { return core_->options(); }

  // Aborts everything still live and joins the thread. Idempotent.
  void Stop();

 private:
  explicit Engine(std::unique_ptr<EngineCore> core);
  void Loop();

  std::unique_ptr<EngineCore> core_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<EngineRequest> inbox_;   // guarded by mu_
  std::vector<std::string> aborts_;    // guarded by mu_
  int queued_ = 0;                     // waiting in core + inbox; guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  EngineLoad load_;                    // snapshot after each step; guarded by mu_
  EngineCounters counters_;            // guarded by mu_
  std::thread thread_;
};

}  // namespace floe
