// The engine's single-threaded heart: continuous batching over a paged KV
// cache. Each Step() plans one forward pass (running sequences' decodes first,
// then prefill chunks of waiting ones under a token budget), runs it on the
// Backend, samples, applies stop rules and emits RequestOutputs.
//
// - Chunked prefill: a long prompt is fed over several steps so decodes of
//   other requests keep flowing.
// - Preemption by recompute: when blocks run out, the most recently admitted
//   running sequence gives its blocks back and waits at the head of the queue;
//   it later recomputes prompt + output (prefix caching usually makes that cheap).
// - Automatic prefix caching: full blocks are hashed; a new request takes the
//   longest cached prefix and starts computing after it.
//
// Not thread-safe: Engine drives it from one thread. Tests drive it directly.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "services/worker/backend/backend.h"
#include "services/worker/engine/engine_options.h"
#include "services/worker/engine/request.h"
#include "services/worker/kv_cache/block_manager.h"

namespace floe {

struct EngineLoad {
  int running = 0;
  int waiting = 0;
  float kv_usage = 0.0f;
  int block_size = 0;
  int total_blocks = 0;
  int64_t preemptions = 0;
};

struct EngineCounters {
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;  // prefill tokens actually run
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
};

class EngineCore {
 public:
  static absl::StatusOr<std::unique_ptr<EngineCore>> Create(std::unique_ptr<Backend> backend,
                                                            EngineOptions options);
  ~EngineCore();

  // Checks a request against the model and engine limits; INVALID_ARGUMENT or
  // OUT_OF_RANGE naming the field and the limit. Also fills a default
  // max_tokens. Reads only immutable state: safe from any thread.
  absl::Status Validate(EngineRequest& request) const;
  // Queues a validated request; it joins the batch at the next Step. A
  // request whose id is live already is answered ALREADY_EXISTS via its sink.
  void Add(EngineRequest request);
  // Ends a live request with `reason` (emitting its final output) and frees its blocks.
  bool Abort(const std::string& id, FinishReason reason = FinishReason::kAbort,
             absl::Status why = absl::OkStatus());
  void AbortAll(const absl::Status& why);

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  // Runs one forward pass. An error from the backend aborts the step's
  // requests (they are told why) and is returned; the engine stays usable.
  absl::Status Step();

  EngineLoad Load() const;
  const EngineCounters& counters() const { return counters_; }
  const ModelConfig& model_config() const { return backend_->config(); }
  const EngineOptions& options() const { return options_; }
  int max_model_len() const { return max_model_len_; }
  const BlockManager& block_manager() const { return *blocks_; }

 private:
  struct Sequence;
  struct Planned {
    Sequence* seq;
    int32_t num_tokens;
  };

  EngineCore(std::unique_ptr<Backend> backend, EngineOptions options, int num_blocks);
  bool Schedule(std::vector<Planned>& plan);
  bool EnsureBlocks(Sequence& seq, int32_t num_tokens);
  void Preempt(Sequence& seq);
  bool Admit(Sequence& seq, int32_t budget, std::vector<Planned>& plan);
  void RegisterFullBlocks(Sequence& seq);
  void Finish(Sequence& seq, RequestOutput& output, FinishReason reason);
  void Release(Sequence& seq);
  void Remove(Sequence* seq);
  void SampleAndEmit(Sequence& seq, float* logits);

  std::unique_ptr<Backend> backend_;
  EngineOptions options_;
  int max_model_len_;
  std::unique_ptr<BlockManager> blocks_;
  // Owned sequences by id; running_ in admission order, waiting_ FIFO.
  absl::flat_hash_map<std::string, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;
  std::deque<Sequence*> waiting_;
  std::vector<float> logits_;
  std::vector<float> raw_logits_;
  uint64_t next_seed_;
  int64_t admission_counter_ = 0;
  EngineCounters counters_;
};

}  // namespace floe
