// The engine's single-threaded heart: continuous batching over a paged KV
// cache. Step() orchestrates one forward pass: DraftPlanner drafts for the
// decoding sequences, Scheduler plans the step (running sequences' decodes
// first, then prefill chunks of waiting ones under a token budget) with the
// PrefixChain's blocks, the Backend runs it, and the engine verifies drafts,
// samples, applies stop rules and emits RequestOutputs.
//
// - Chunked prefill: a long prompt is fed over several steps so decodes of
//   other requests keep flowing.
// - Preemption by recompute: when blocks run out, the most recently admitted
//   running sequence gives its blocks back and waits at the head of the queue;
//   it later recomputes prompt + output (prefix caching usually makes that cheap).
// - Automatic prefix caching: full blocks are hashed; a new request takes the
//   longest cached prefix and starts computing after it.
// - Speculative decoding (lossless): installed Proposers draft k tokens for
//   decoding sequences; the step runs [last token, d1..dk] with k+1 logits
//   rows, samples the target's token at each position exactly as plain
//   decoding would (same Sampler, counter RNG keyed by output position), keeps
//   drafts while they equal the target's tokens and emits them plus the
//   target's next token; stop rules apply token by token. Rejected positions
//   are rolled back (num_computed = accepted prefix, blocks past it released;
//   only blocks whose tokens are final are ever registered for prefix caching).
//   Tree drafts (DraftProposal::parents) run under a tree attention mask; the
//   walk from the root accepts the child carrying the target's token at each
//   node, and the accepted path's KV is copied into its chain slots.
//
// Not thread-safe: Engine drives it from one thread. Tests drive it directly.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "services/worker/backend/backend.h"
#include "services/worker/engine/draft_planner.h"
#include "services/worker/engine/engine_options.h"
#include "services/worker/engine/prefix_chain.h"
#include "services/worker/engine/request.h"
#include "services/worker/engine/scheduler.h"
#include "services/worker/engine/sequence.h"
#include "services/worker/kv_cache/block_manager.h"
#include "services/worker/speculation/proposer.h"

namespace floe {

struct EngineLoad {
  int running = 0;
  int waiting = 0;
  float kv_usage = 0.0f;
  int block_size = 0;
  int total_blocks = 0;
  int64_t preemptions = 0;
};

// Per proposer, cumulative.
struct SpeculationCounters {
  std::string proposer;
  int64_t drafts = 0;           // sequences×steps that verified a draft of this proposer
  int64_t draft_tokens = 0;     // draft tokens verified
  int64_t accepted_tokens = 0;  // draft tokens that matched the target (and were emitted)
  // accepted_per_position[i]: drafts whose token i was accepted (size k).
  std::vector<int64_t> accepted_per_position;
};

// Structured outputs, cumulative.
struct StructuredOutputCounters {
  // Upper bounds (seconds) of the mask-time histogram's buckets; +Inf after.
  static constexpr std::array<double, 12> kMaskBuckets = {1e-6,   2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,
                                                          1e-4,   2.5e-4, 5e-4,   1e-3, 2.5e-3, 1e-2};
  int64_t masks = 0;  // token masks computed (one per constrained sampled token)
  // Every kMaskSampleEvery-th mask is timed: its histogram.
  static constexpr int kMaskSampleEvery = 16;
  std::array<int64_t, kMaskBuckets.size() + 1> mask_seconds_buckets{};  // not cumulative
  int64_t mask_seconds_count = 0;
  double mask_seconds_sum = 0.0;
  int64_t draft_tokens_cut = 0;         // proposers' draft tokens the grammar forbade (never verified)
  int64_t forced_draft_tokens = 0;      // forced tokens verified as drafts
  int64_t forced_draft_accepted = 0;    // of those, accepted
  int64_t dead_ends = 0;                // requests ended because the mask left no token
};

struct EngineCounters {
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;  // prefill tokens actually run
  // SwiftKV models: tokens run only through the first num_key_value_layers
  // (every row of a step but its logits rows; tree rows run them all).
  int64_t swiftkv_skipped_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  std::vector<SpeculationCounters> speculation;  // one per installed proposer, in order
  StructuredOutputCounters structured_output;
};

// The step cost curve (tokens run -> ms) of `backend`: one sequence of 1, 2,
// 4, ... up to min(max_tokens, 64) tokens, every row with logits, the median
// of 3 rounds after a warm-up. Writes KV into the first blocks of the pool,
// so it runs before any request. draft_budget.h extrapolates past 64.
absl::StatusOr<StepCostCurve> MeasureStepCost(Backend& backend, int block_size, int max_tokens);

class EngineCore {
 public:
  // `proposers` (possibly none) draft for speculative decoding, see
  // EngineOptions::num_speculative_tokens; the engine owns them.
  static absl::StatusOr<std::unique_ptr<EngineCore>> Create(
      std::unique_ptr<Backend> backend, EngineOptions options,
      std::vector<std::unique_ptr<Proposer>> proposers = {});
  ~EngineCore();

  // Queues a request resolved by ResolveRequest (services/request/): prompt
  // ids in the vocabulary and shorter than max_model_len(), max_tokens > 0
  // and within the context, sampling values in range. Nothing here checks it
  // again. It joins the batch at the next Step. A request whose id is live
  // already is answered ALREADY_EXISTS via its sink.
  void Add(EngineRequest request);
  // Ends a live request with `reason` (emitting its final output) and frees its blocks.
  bool Abort(const std::string& id, FinishReason reason = FinishReason::kAbort,
             absl::Status why = absl::OkStatus());
  void AbortAll(const absl::Status& why);

  bool HasWork() const { return !scheduler_->running().empty() || !scheduler_->waiting().empty(); }
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
  EngineCore(std::unique_ptr<Backend> backend, EngineOptions options, int num_blocks,
             std::vector<std::unique_ptr<Proposer>> proposers);
  // The forward batch of a step plan (a drafting sequence runs [last token, draft]).
  void BuildBatch(const std::vector<Planned>& plan, std::vector<ForwardSequence>& batch);
  void Finish(Sequence& seq, RequestOutput& output, FinishReason reason);
  // Verifies the sequence's draft (num_rows > 1) or samples its next token,
  // applies stop rules and emits. `hidden`: the rows' hidden states (null
  // unless a proposer reads them).
  // `drawn`: the rows' tokens drawn on the device (-1: sample on the host;
  // null: every row on the host).
  void SampleAndEmit(Sequence& seq, float* logits, const float* hidden, const int32_t* drawn, int32_t num_rows);
  // The sampled token, or Sampler::kNoToken where the grammar's mask left
  // nothing (the request then ends).
  int32_t SampleOne(Sequence& seq, float* logits_row, int32_t drawn, RequestOutput& output);
  // The tokens seq's grammar allows next (grammar_mask_), EOS and special
  // stop ids only where the output may end.
  std::span<const uint32_t> GrammarMask(Sequence& seq);
  // Advances seq's grammar by an emitted token.
  void AcceptGrammarToken(Sequence& seq, int32_t token);
  // For a backend that samples on its device: what it does with each logits
  // row of the step (row_sampling_), and the device's draws (row_tokens_).
  absl::Status SampleOnDevice(const std::vector<Planned>& plan, std::span<const ForwardSequence> batch);
  FinishReason StopReason(const Sequence& seq, int32_t token, RequestOutput& output) const;
  // prompt_logprobs: the logprob, rank and top alternatives of each prompt
  // token that this step's rows predict (row r: position num_computed + r + 1).
  void RecordPromptLogprobs(Sequence& seq, const float* logits, int32_t num_rows);

  std::unique_ptr<Backend> backend_;
  EngineOptions options_;
  int max_model_len_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<PrefixChain> chain_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<DraftPlanner> drafts_;
  // Owned sequences by id.
  absl::flat_hash_map<std::string, std::unique_ptr<Sequence>> sequences_;
  std::vector<int32_t> accepted_path_;
  std::vector<KvSlotCopy> kv_copies_;
  std::vector<float> logits_;
  std::vector<float> raw_logits_;
  std::vector<RowSampling> row_sampling_;
  std::vector<int32_t> row_tokens_;
  std::vector<int32_t> row_depth_;
  std::vector<uint32_t> grammar_mask_;
  uint64_t next_seed_;
  EngineCounters counters_;
};

}  // namespace floe
