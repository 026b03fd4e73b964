// Collectives among the ranks of one worker (tensor / sequence parallel):
// the model's all-reduces, all-gathers and all-to-alls, and the step plan's
// broadcast from rank 0. Implemented over libraries made for it: Gloo for
// CPU ranks (gloo_communicator.h), NCCL for GPU ranks.
//
// Every call is collective: all ranks make the same calls in the same order
// with matching sizes. Every call has the communicator's deadline: a rank
// that died or hangs turns into DEADLINE_EXCEEDED or UNAVAILABLE on the
// others, never a wait without end. After an error the communicator is
// unusable (the worker exits and its supervisor restarts the ranks).
//
// Not thread-safe: one thread per rank drives it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace floe {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data = the element-wise sum of every rank's data, on every rank.
  virtual absl::Status AllReduceSum(std::span<float> data) = 0;
  // out = every rank's `in`, in rank order (out.size() = size() * in.size()).
  virtual absl::Status AllGather(std::span<const float> in, std::span<float> out) = 0;
  // Rank r sends in[send_offset(j) .. + send_counts[j]) to rank j and
  // receives rank j's piece for it into out[recv_offset(j) .. +
  // recv_counts[j]), offsets being the running sums of the counts.
  virtual absl::Status AllToAll(std::span<const float> in, std::span<const int64_t> send_counts,
                                std::span<float> out, std::span<const int64_t> recv_counts) = 0;
  // Every rank's `data` = root's `data` (same size on every rank). `wait`
  // > 0 replaces the communicator's deadline for this call (a follower rank
  // idles in it between steps).
  virtual absl::Status Broadcast(std::span<std::byte> data, int root,
                                 std::chrono::milliseconds wait = std::chrono::milliseconds(0)) = 0;
  virtual absl::Status Barrier() = 0;
};

// A collective that failed because the connection to a peer broke names
// that peer: its world rank rides on the Status (a payload), for the log
// line of the worker that goes down ("rank_failed"), as a rank process's
// exit names its rank in one pod.
inline constexpr char kLostRankPayload[] = "type.floe.dev/lost_rank";
inline absl::Status WithLostRank(absl::Status status, int world_rank) {
  if (!status.ok() && world_rank >= 0) status.SetPayload(kLostRankPayload, absl::Cord(std::to_string(world_rank)));
  return status;
}
// -1: the status names no lost rank (a deadline, a bad size, OK).
inline int LostRank(const absl::Status& status) {
  const auto payload = status.GetPayload(kLostRankPayload);
  int rank = -1;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &rank)) return -1;
  return rank;
}

}  // namespace floe
