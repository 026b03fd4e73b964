// One worker over several ranks (tensor parallel): rank 0 owns the engine
// and drives the others. LeaderBackend wraps rank 0's backend: every call
// (KV allocation, each forward step's plan, KV slot copies) is broadcast to
// the other ranks before rank 0 runs it, so every rank runs the same steps
// and meets the model's collectives in the same order. RunFollower is the
// loop of the other ranks: receive a command, run it on the rank's own
// backend (its shard), until the leader says stop or the communicator
// fails.
//
// Commands travel as a fixed 16-byte header (op, payload bytes) and a
// payload of int32s, both through Communicator::Broadcast from rank 0.
//
// Threading: as Backend (the engine thread on rank 0; the main thread on
// the others).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "services/worker/backend/backend.h"
#include "services/worker/parallel/communicator.h"

namespace floe {

class LeaderBackend final : public Backend {
 public:
  // `local` is rank 0's backend over `communicator` (rank 0). A failed
  // broadcast or step leaves the ranks out of step for good: `on_failure`
  // hears of it first (the worker stops serving and exits).
  LeaderBackend(std::unique_ptr<Backend> local, std::unique_ptr<Communicator> communicator,
                std::function<void(const absl::Status&)> on_failure)
      : comm_(std::move(communicator)), local_(std::move(local)), on_failure_(std::move(on_failure)) {}
  // Tells the followers to stop (best effort).
  ~LeaderBackend() override;

  const ModelConfig& config() const override { return local_->config(); }
  size_t KvBytesPerBlock(int block_size) const override { return local_->KvBytesPerBlock(block_size); }
  absl::Status AllocateKvCache(int num_blocks, int block_size) override;
  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override;
  std::span<const float> LastHiddenStates() const override { return local_->LastHiddenStates(); }
  absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) override;

 private:
  absl::Status Send(int32_t op, const std::vector<int32_t>& payload);
  absl::Status Failed(absl::Status status);

  std::unique_ptr<Communicator> comm_;  // outlives local_, which uses it
  std::unique_ptr<Backend> local_;
  std::function<void(const absl::Status&)> on_failure_;
  std::vector<int32_t> payload_;
  bool stopped_ = false;
};

// Runs rank > 0 until the leader stops it (OK) or a collective fails (the
// error: the leader died or hangs, or this rank's forward failed).
absl::Status RunFollower(Backend& backend, Communicator& communicator);

}  // namespace floe
