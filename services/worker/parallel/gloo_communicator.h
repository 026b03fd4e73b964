// Communicator over Gloo (Debian's libgloo-dev): its TCP transport, on
// loopback or the pod network, for CPU ranks.
//
// Rendezvous: ranks publish their addresses in a store; on one machine a
// Gloo FileStore in a folder every rank can reach (floe-worker uses a fresh
// temporary folder per worker), across machines a RendezvousStore (rank 0
// serves one over gRPC: rank_store.h). `group` prefixes the keys so several
// communicators can share a store.
//
// Errors: Gloo reports failures (a peer gone, a deadline passed, sizes that
// disagree) as exceptions; every call here catches them and answers a
// Status that names the collective and the rank, and, where the connection
// to a peer broke, that peer's world rank (LostRank, communicator.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/parallel/communicator.h"
#include "services/worker/parallel/rendezvous_store.h"

namespace gloo {
class Context;
}

namespace floe {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string store_dir;           // FileStore folder shared by the ranks, or
  RendezvousStore* store = nullptr;  // a store they reach (must outlive Connect)
  std::string group = "floe";      // key prefix in the store
  std::string hostname = "127.0.0.1";  // the address this rank listens on
  // The world rank of each rank of this group, for LostRank (empty: the
  // group is the world).
  std::vector<int> world_ranks;
  // Deadline of every collective, and of the rendezvous (ranks may still
  // be loading their checkpoint).
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(10)};
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects to every other rank (full mesh); fails with DEADLINE_EXCEEDED
  // when a rank does not show up within the timeout.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Connect(const GlooOptions& options);
  ~GlooCommunicator() override;

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
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int size, std::chrono::milliseconds timeout,
                   std::vector<int> world_ranks)
      : context_(std::move(context)),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        world_ranks_(std::move(world_ranks)) {}
  template <class Fn>
  absl::Status Run(const char* what, const Fn& fn);
  // Learns peer_addresses_ (a collective of its own, at connect).
  absl::Status ExchangePeerAddresses();
  // The world rank whose pair `error` names (by its address, or by an IP no
  // other peer of this group has); -1: none.
  int PeerIn(const char* error) const;

  std::shared_ptr<gloo::Context> context_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::vector<int> world_ranks_;
  // By group rank: the address the peer's end of its pair with this rank
  // listens on ("[IP]:PORT", a port per pair), as Gloo's errors print it
  // where this rank connected; "" for this rank.
  std::vector<std::string> peer_addresses_;
  uint32_t tag_ = 0;  // each collective its own tag, so a late message never matches a later call
  bool broken_ = false;
};

// The communicators of one rank of a worker's T x S grid
// (model/parallel_layout.h): every rank (the step plan, the TP mode), the
// rank's SP group (ranks t S .. t S + S - 1) and its TP group (ranks s,
// S + s, ...); a group is null where it is one rank or the whole worker.
struct GlooGrid {
  std::unique_ptr<GlooCommunicator> world, sequence, tensor;
};

// Connects them in that order (every rank does), keys prefixed by
// options.group; options.size is the world. Returns once every rank has
// connected all its groups (a world barrier).
absl::StatusOr<GlooGrid> ConnectGlooGrid(const GlooOptions& options, int sequence_parallel_size);

}  // namespace floe
