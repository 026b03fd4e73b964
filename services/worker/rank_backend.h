// The model's backend on each rank of a worker (model/parallel_layout.h):
// rank 0's, which the engine drives (LeaderBackend over the others when
// there are several), and the other ranks', whose whole life is here
// (RunFollowerRank: load, meet the group, run the leader's steps). CPU or
// CUDA per the device rank 0 chose, Gloo (and NCCL for GPU ranks) for the
// collectives, the weight cache of the CPU backend.
//
// Failures are logged here with their event ("load_failed",
// "rank_connect_failed", "backend_failed") and returned; the worker exits 1.
// Thread: main's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "common/auth/internal_trust.h"
#include "common/log/startup_clock.h"
#include "common/rpc/server_runner.h"
#include "services/worker/backend/backend.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/backend/rank_group.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/parallel/cost_model.h"
#include "services/worker/parallel/rank_store.h"
#include "services/worker/worker_flags.h"
#include "services/worker/worker_plan.h"

namespace floe {

// The ranks are out of step for good (a collective failed, a rank process
// exited): stops serving, logs "rank_failed" and exits 1; never returns.
// `rank`: the lost rank (a local rank's exit, or the peer of a broken
// connection: LostRank); -1: not known.
using RankFailure = std::function<void(const std::string& why, int64_t rank)>;
RankFailure FailWorkerOnRankFailure(ServerRunner* server);

// "off", "hit", "written", "failed": the weight cache's outcome for logs
// and the startup metric.
const char* WeightCacheOutcomeName(WeightCacheReport::Outcome outcome);

struct RankZeroBackend {
  struct Links;                  // the communicators `backend` uses (rank_backend.cc)
  std::shared_ptr<Links> links;  // outlives `backend`: keep this until the engine is gone
  std::shared_ptr<ParallelStats> parallel_stats;  // rank 0's collective times and modes
  std::unique_ptr<Backend> backend;
  int64_t weight_bytes = 0;    // rank 0's
  int64_t kv_block_bytes = 0;  // per KV block of --block-size tokens
  cpu::KvDtype kv_dtype = cpu::KvDtype::kF32;  // --kv-cache-dtype, resolved for the device
  WeightCacheReport::Outcome cache_outcome = WeightCacheReport::Outcome::kOff;
  std::optional<int64_t> device_kv_bytes;  // --device cuda: what --gpu-memory-utilization leaves
  std::string gpu_name;
  Hardware hardware;  // the cost model's figures for this device
};

// Rank 0's backend. With several ranks: connects the group (meeting through
// `rank_store` with remote ranks, then closing it; else plan.ranks' folder),
// agrees on the device, sets plan.policy's threshold (the flag's, else the
// cost model's), logs the layout and wraps the backend in a LeaderBackend
// whose failures go to `on_rank_failure`. Ends the startup phases it runs.
// `server`: NOT_SERVING on a CUDA fault.
absl::StatusOr<RankZeroBackend> BuildRankZeroBackend(const WorkerFlags& flags, WorkerPlan& plan,
                                                     const Checkpoint& checkpoint, RankStoreService* rank_store,
                                                     ServerRunner* server, RankFailure on_rank_failure,
                                                     StartupClock& startup);

// A rank > 0 from start to end: loads the checkpoint, meets the group
// (through --rank-store or --rank-dir), runs the leader's steps until it
// stops them (exit code 0) or the group fails (1). Local ranks die with
// rank 0 (PDEATHSIG, rank_launch.h).
int RunFollowerRank(const WorkerFlags& flags, const WorkerPlan& plan,
                    std::shared_ptr<grpc::ChannelCredentials> credentials,
                    std::shared_ptr<const InternalTrust> internal_trust);

}  // namespace floe
