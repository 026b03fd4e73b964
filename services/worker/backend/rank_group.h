// One worker over several ranks (a T x S grid, model/parallel_layout.h):
// rank 0 owns the engine and drives the others. LeaderBackend wraps rank
// 0's backend: every call (KV allocation, each forward step's plan and its
// parallel mode, KV slot copies) is broadcast to the other ranks before
// rank 0 runs it, so every rank runs the same steps in the same mode and
// meets the model's collectives in the same order. RunFollower is the loop
// of the other ranks: receive a command, run it on the rank's own backend
// (its shard), until the leader says stop or the communicator fails.
//
// The mode of each step comes from a ShiftPolicy (Shift Parallelism: TP
// while the step's scheduled tokens are few, SP x TP from the threshold on),
// and what the ranks did is counted in ParallelStats for the metrics.
//
// Commands travel as a fixed 16-byte header (op, payload bytes) and a
// payload of int32s, both through Communicator::Broadcast from rank 0.
//
// Threading: as Backend (the engine thread on rank 0; the main thread on
// the others).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/worker/backend/backend.h"
#include "services/worker/backend/shift_policy.h"
#include "services/worker/parallel/communicator.h"

namespace floe {

// Counted by rank 0 per step; read by the metrics at scrape time.
struct ParallelStats {
  // Upper bounds (seconds) of the per-step collective-time histogram.
  static constexpr double kBuckets[] = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1, 3};
  static constexpr int kNumBuckets = sizeof(kBuckets) / sizeof(kBuckets[0]);

  std::atomic<int> mode{0};  // ParallelMode of the last step
  std::atomic<int64_t> switches{0};
  std::atomic<int64_t> steps[2] = {0, 0}, tokens[2] = {0, 0};  // by ParallelMode
  // Wall time rank 0 spent in the model's collectives (TimedCommunicator
  // adds to it), and its per-step histogram (non-cumulative bucket counts;
  // the last is +Inf).
  std::atomic<int64_t> collective_ns{0};
  std::atomic<int64_t> step_collective_ns_sum{0};
  std::atomic<int64_t> step_collective_buckets[kNumBuckets + 1] = {};
};

class LeaderBackend final : public Backend {
 public:
  // `local` is rank 0's backend; `communicator` spans every rank (rank 0
  // here) and must outlive this. A failed broadcast or step leaves the
  // ranks out of step for good: `on_failure` hears of it first (the worker
  // stops serving and exits). `stats` may be null.
  LeaderBackend(std::unique_ptr<Backend> local, Communicator& communicator,
                std::function<void(const absl::Status&)> on_failure, ShiftPolicy policy = {},
                std::shared_ptr<ParallelStats> stats = nullptr)
      : comm_(&communicator),
        local_(std::move(local)),
        on_failure_(std::move(on_failure)),
        policy_(policy),
        stats_(stats ? std::move(stats) : std::make_shared<ParallelStats>()) {}
  // Tells the followers to stop (best effort).
  ~LeaderBackend() override;

  // The policy of the following steps (bench_shift compares the modes on one group).
  void set_policy(const ShiftPolicy& policy) { policy_ = policy; }

  const ModelConfig& config() const override { return local_->config(); }
  size_t KvBytesPerBlock(int block_size) const override { return local_->KvBytesPerBlock(block_size); }
  absl::Status AllocateKvCache(int num_blocks, int block_size) override;
  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override;
  std::span<const float> LastHiddenStates() const override { return local_->LastHiddenStates(); }
  absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) override;
  // Rank 0 holds whole logits rows (the vocabulary slices gathered there):
  // sampling on its device needs no other rank.
  bool SamplesOnDevice() const override { return local_->SamplesOnDevice(); }
  absl::Status SampleLogits(std::span<const RowSampling> rows, int32_t* tokens, float* logits) override {
    return local_->SampleLogits(rows, tokens, logits);
  }

 private:
  absl::Status Send(int32_t op, const std::vector<int32_t>& payload);
  absl::Status Failed(absl::Status status);

  Communicator* comm_;
  std::unique_ptr<Backend> local_;
  std::function<void(const absl::Status&)> on_failure_;
  ShiftPolicy policy_;
  std::shared_ptr<ParallelStats> stats_;
  std::vector<int32_t> payload_;
  bool stopped_ = false;
};

// Runs rank > 0 until the leader stops it (OK) or a collective fails (the
// error: the leader died or hangs, or this rank's forward failed).
absl::Status RunFollower(Backend& backend, Communicator& communicator);

}  // namespace floe
