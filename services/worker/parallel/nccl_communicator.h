// Communicator over NCCL for GPU ranks (one GPU per rank). Every span is
// device memory on this rank's device; each call runs on the
// communicator's stream and returns once it finished there, or aborts the
// communicator at the deadline (DEADLINE_EXCEEDED: a rank died or hangs).
//
// Rendezvous: rank 0's ncclUniqueId travels over a bootstrap Communicator
// (Gloo over TCP), so NCCL needs no launcher of its own.
//
// Built where CUDA is found; runs only on a machine with >= 2 GPUs
// (bench/gpu/check.sh). Not thread-safe, as Communicator.
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "services/worker/parallel/communicator.h"

namespace floe {

struct NcclOptions {
  int device = 0;                  // this rank's CUDA device
  Communicator* bootstrap = nullptr;  // ranks and size come from it
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Connect(const NcclOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(std::span<float> data) override;
  absl::Status AllGather(std::span<const float> in, std::span<float> out) override;
  absl::Status AllToAll(std::span<const float> in, std::span<const int64_t> send_counts, std::span<float> out,
                        std::span<const int64_t> recv_counts) override;
  absl::Status Broadcast(std::span<std::byte> data, int root,
                         std::chrono::milliseconds wait = std::chrono::milliseconds(0)) override;
  absl::Status Barrier() override;

 private:
  struct State;
  NcclCommunicator(std::unique_ptr<State> state, int rank, int size, std::chrono::milliseconds timeout);
  // Waits for the stream within the deadline; aborts the communicator past it.
  absl::Status Wait(const char* what);

  std::unique_ptr<State> state_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  bool broken_ = false;
};

}  // namespace floe
