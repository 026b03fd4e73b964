// A Communicator that adds the wall time of every call to a counter: the
// worker's collective-time metric, measured around the real collectives.
//
// Threading: as Communicator; the counter may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>

#include "services/worker/parallel/communicator.h"

namespace floe {

class TimedCommunicator final : public Communicator {
 public:
  // `inner` and `nanos` must outlive this.
  TimedCommunicator(Communicator& inner, std::atomic<int64_t>& nanos) : inner_(inner), nanos_(nanos) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  absl::Status AllReduceSum(std::span<float> data) override {
    return Timed([&] { return inner_.AllReduceSum(data); });
  }
  absl::Status AllGather(std::span<const float> in, std::span<float> out) override {
    return Timed([&] { return inner_.AllGather(in, out); });
  }
  absl::Status AllToAll(std::span<const float> in, std::span<const int64_t> send_counts, std::span<float> out,
                        std::span<const int64_t> recv_counts) override {
    return Timed([&] { return inner_.AllToAll(in, send_counts, out, recv_counts); });
  }
  absl::Status Broadcast(std::span<std::byte> data, int root, std::chrono::milliseconds wait) override {
    return Timed([&] { return inner_.Broadcast(data, root, wait); });
  }
  absl::Status Barrier() override {
    return Timed([&] { return inner_.Barrier(); });
  }

 private:
  template <class Fn>
  absl::Status Timed(const Fn& fn) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = fn();
    nanos_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                         .count(),
                     std::memory_order_relaxed);
    return s;
  }

  Communicator& inner_;
  std::atomic<int64_t>& nanos_;
};

}  // namespace floe
