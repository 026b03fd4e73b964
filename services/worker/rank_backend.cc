#include "services/worker/rank_backend.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log/log.h"
#include "services/worker/parallel/gloo_communicator.h"
#include "services/worker/parallel/timed_communicator.h"
#ifdef FLOE_HAVE_CUDA
#include "services/worker/backend/cuda_backend.h"
#endif
#ifdef FLOE_HAVE_NCCL
#include "services/worker/parallel/nccl_communicator.h"
#endif

namespace floe {
namespace {

// The weight cache folder --weight-cache names ("" for off).
std::string WeightCacheDir(const WorkerFlags& f) {
  if (f.weight_cache == "off") return "";
  if (f.weight_cache == "auto") return (std::filesystem::path(f.model) / ".floe-cache").string();
  return f.weight_cache;
}

uint64_t WeightCacheMaxBytes(const WorkerFlags& f) {
  return static_cast<uint64_t>(f.weight_cache_max_gb * static_cast<double>(uint64_t{1} << 30));
}

// Logs what the weight cache did.
void LogWeightCache(const CpuBackend& backend, int rank) {
  const WeightCacheReport& r = backend.weight_cache();
  if (r.outcome != WeightCacheReport::Outcome::kOff) {
    LogEvent(r.outcome == WeightCacheReport::Outcome::kFailed ? LogLevel::kWarning : LogLevel::kInfo, "worker",
             "weight_cache",
             {{"rank", static_cast<int64_t>(rank)},
              {"outcome", std::string(WeightCacheOutcomeName(r.outcome))},
              {"path", r.path},
              {"detail", r.detail},
              {"evicted", absl::StrJoin(r.evicted, ",")}});
  }
}

// Rank 0's failures: logged, then returned.
absl::Status Failed(const char* event, absl::Status status) {
  LogEvent(LogLevel::kError, "worker", event, {{"error", std::string(status.message())}});
  return status;
}

// A follower's failures: logged with its rank; its exit code.
int FollowerFailed(const char* event, const absl::Status& status, int rank) {
  LogEvent(LogLevel::kError, "worker", event,
           {{"rank", static_cast<int64_t>(rank)}, {"error", std::string(status.message())}});
  return 1;
}

// An fp8 cache without a checkpoint's kv_cache_scheme: vLLM's behaviour
// (scales of 1.0: values past 448 saturate), and its warning.
void WarnOfDefaultKvScales(const WorkerFlags& f, cpu::KvDtype dtype, const ModelWeights& weights) {
  if (dtype != cpu::KvDtype::kFp8E4m3 || !weights.kv_scales.empty() || f.rank != 0) return;
  LogEvent(LogLevel::kWarning, "worker", "kv_cache_scales_default",
           {{"detail", "the checkpoint has no kv_cache_scheme (per-layer k_scale, v_scale): the fp8 KV cache uses "
                       "scales of 1.0, which may cost accuracy"}});
}

// One rank's CPU backend over its communicators (all null for one rank).
absl::StatusOr<std::unique_ptr<CpuBackend>> MakeCpuBackend(const WorkerFlags& f, int threads,
                                                           const Checkpoint& checkpoint, cpu::KvDtype kv_dtype,
                                                           Communicator* world, Communicator* sequence,
                                                           Communicator* tensor) {
  WarnOfDefaultKvScales(f, kv_dtype, checkpoint.weights());
  return CpuBackend::Create(checkpoint.config(), checkpoint.weights(),
                            {.num_threads = threads,
                             .communicator = world,
                             .sequence_parallel_size = f.sequence_parallel_size,
                             .sequence_group = sequence,
                             .tensor_group = tensor,
                             .weight_cache_dir = WeightCacheDir(f),
                             .weights_fingerprint = checkpoint.fingerprint(),
                             .weight_cache_max_bytes = WeightCacheMaxBytes(f),
                             .release_source_pages = [&checkpoint] { checkpoint.ReleasePages(); },
                             .kv_dtype = kv_dtype,
                             .kv_scales = checkpoint.weights().kv_scales});
}

// Every rank runs on the device rank 0 chose: its choice travels on the
// Gloo world right after the ranks meet (ranks started elsewhere may have
// other builds or machines). A rank that cannot follow says why.
absl::StatusOr<Device> AgreeOnDevice(Communicator& world, Device mine, const DeviceSupport& support, int ranks) {
  int32_t code = static_cast<int32_t>(mine);
  if (absl::Status s = world.Broadcast({reinterpret_cast<std::byte*>(&code), sizeof(code)}, 0); !s.ok()) return s;
  const Device leader = code == static_cast<int32_t>(Device::kCuda) ? Device::kCuda : Device::kCpu;
  if (leader == Device::kCuda && mine != Device::kCuda) {
    auto can = ChooseDevice("cuda", support, ranks, 1);
    if (!can.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("rank 0 runs on cuda, this rank cannot: ", can.status().message()));
    }
  }
  return leader;
}

#ifdef FLOE_HAVE_CUDA
struct MadeCudaBackend {
  std::unique_ptr<CudaBackend> backend;
  int64_t kv_cache_bytes = 0;  // what --gpu-memory-utilization leaves for the KV cache
};

// The GPU worker's backend: weights uploaded, activations reserved for the
// largest step, the KV budget measured after both. A CUDA fault in a step
// turns the worker NOT_SERVING and exits it (its supervisor restarts it).
absl::StatusOr<MadeCudaBackend> MakeCudaBackend(const ModelConfig& config, const ModelWeights& weights,
                                                const WorkerFlags& f, cpu::KvDtype kv_dtype, ServerRunner* server,
                                                CudaBackendOptions options) {
  auto on_fault = [server](const absl::Status& status) {
    if (server) server->SetServing(false);
    LogEvent(LogLevel::kError, "worker", "device_failed", {{"error", std::string(status.message())}});
    // The step's requests get this status first (the engine answers them
    // once Forward returns); then the process goes.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::_Exit(1);
    }).detach();
  };
  options.on_fault = on_fault;
  WarnOfDefaultKvScales(f, kv_dtype, weights);
  options.kv_dtype = kv_dtype == cpu::KvDtype::kBf16       ? cuda::KvDtype::kBf16
                     : kv_dtype == cpu::KvDtype::kFp8E4m3 ? cuda::KvDtype::kFp8E4m3
                                                           : cuda::KvDtype::kF32;
  options.kv_scales = weights.kv_scales;
  auto created = CudaBackend::Create(config, weights, options);
  if (!created.ok()) return created.status();
  std::unique_ptr<CudaBackend> backend = std::move(created).value();
  // A step runs at most the token budget; its logits rows are one per
  // sequence and draft token (a larger step grows the buffers, or fails
  // that step's requests with RESOURCE_EXHAUSTED once the KV cache took
  // the memory).
  const int64_t rows = std::max(1, f.max_num_batched_tokens);
  const int64_t logit_rows =
      std::min<int64_t>(rows, int64_t{f.max_num_seqs} * (1 + std::max(0, f.num_speculative_tokens)));
  if (absl::Status s = backend->ReserveActivations(rows, logit_rows); !s.ok()) return s;
  auto kv = backend->KvCacheBudget(f.gpu_memory_utilization);
  if (!kv.ok()) return kv.status();
  LogEvent(LogLevel::kInfo, "worker", "cuda_backend",
           {{"rank", static_cast<int64_t>(f.rank)},
            {"device", backend->device_name()},
            {"weight_bytes", static_cast<int64_t>(backend->WeightBytes())},
            {"gpu_memory_utilization", f.gpu_memory_utilization},
            {"kv_cache_budget_bytes", *kv}});
  return MadeCudaBackend{std::move(backend), *kv};
}
#endif

#if defined(FLOE_HAVE_CUDA) && defined(FLOE_HAVE_NCCL)
// GPU ranks' communicators for the model's collectives, one per Gloo group
// (which carries each NCCL id; every rank connects them in the same order).
// The Gloo world still carries the leader's step plans.
struct NcclGrid {
  std::unique_ptr<NcclCommunicator> world, sequence, tensor;
};
absl::StatusOr<NcclGrid> ConnectNcclGrid(const GlooGrid& gloo, int device) {
  NcclGrid grid;
  const std::pair<GlooCommunicator*, std::unique_ptr<NcclCommunicator>*> groups[] = {
      {gloo.world.get(), &grid.world}, {gloo.sequence.get(), &grid.sequence}, {gloo.tensor.get(), &grid.tensor}};
  for (const auto& [bootstrap, out] : groups) {
    if (!bootstrap) continue;
    auto connected = NcclCommunicator::Connect({.device = device, .bootstrap = bootstrap});
    if (!connected.ok()) return connected.status();
    *out = std::move(connected).value();
  }
  return grid;
}
#endif

// Runs `backend` as a follower until the leader stops it.
int Follow(Backend& backend, int64_t weight_bytes, Communicator& world, int rank) {
  LogEvent(LogLevel::kInfo, "worker", "rank_ready",
           {{"rank", static_cast<int64_t>(rank)}, {"weight_bytes", weight_bytes}});
  const absl::Status status = RunFollower(backend, world);
  LogEvent(status.ok() ? LogLevel::kInfo : LogLevel::kError, "worker", "rank_stopped",
           {{"rank", static_cast<int64_t>(rank)}, {"status", status.ToString()}});
  return status.ok() ? 0 : 1;
}

}  // namespace

struct RankZeroBackend::Links {
  GlooGrid grid;
  // Rank 0's communicators, each timed for the collective-time metric (the
  // LeaderBackend's plan broadcasts go around the timing).
  std::vector<std::unique_ptr<TimedCommunicator>> timed;
#if defined(FLOE_HAVE_CUDA) && defined(FLOE_HAVE_NCCL)
  NcclGrid nccl;  // GPU ranks: the model's collectives (the Gloo world carries the plans)
#endif
};

RankFailure FailWorkerOnRankFailure(ServerRunner* server) {
  return [server](const std::string& why, int64_t rank) {
    // The ranks are out of step for good: stop serving, exit non-zero (the
    // supervisor restarts the worker; the router ejects it meanwhile).
    server->SetServing(false);
    LogEvent(LogLevel::kError, "worker", "rank_failed", {{"rank", rank}, {"error", why}});
    std::_Exit(1);
  };
}

const char* WeightCacheOutcomeName(WeightCacheReport::Outcome outcome) {
  static constexpr const char* kNames[] = {"off", "hit", "written", "failed"};
  return kNames[static_cast<int>(outcome)];
}

absl::StatusOr<RankZeroBackend> BuildRankZeroBackend(const WorkerFlags& f, WorkerPlan& plan,
                                                     const Checkpoint& checkpoint, RankStoreService* rank_store,
                                                     ServerRunner* server, RankFailure on_rank_failure,
                                                     StartupClock& startup) {
  RankZeroBackend made;
  made.links = std::make_shared<RankZeroBackend::Links>();
  made.parallel_stats = std::make_shared<ParallelStats>();
  RankZeroBackend::Links& links = *made.links;
  auto timing = [&](Communicator* c) -> Communicator* {
    if (!c) return nullptr;
    links.timed.push_back(std::make_unique<TimedCommunicator>(*c, made.parallel_stats->collective_ns));
    return links.timed.back().get();
  };
  const ModelConfig& config = checkpoint.config();
  const int ranks = plan.ranks;
  made.kv_dtype = ResolveKvCacheDtype(f, plan.device.device, config, checkpoint.weights());
  if (ranks > 1) {
    auto connected = ConnectGlooGrid({.rank = 0,
                                      .size = ranks,
                                      .store_dir = f.rank_dir,
                                      .store = rank_store ? &rank_store->Local() : nullptr,
                                      .hostname = f.rank_host},
                                     f.sequence_parallel_size);
    if (rank_store) rank_store->Close();  // every rank has connected (or the worker gives up)
    if (!connected.ok()) return Failed("rank_connect_failed", connected.status());
    links.grid = std::move(connected).value();
    if (auto agreed = AgreeOnDevice(*links.grid.world, plan.device.device, plan.support, ranks); !agreed.ok())
      return Failed("rank_connect_failed", agreed.status());
    startup.Phase("rank_connect");
  }
  if (plan.device.device == Device::kCuda) {
#ifdef FLOE_HAVE_CUDA
    CudaBackendOptions cuda_options;
    cuda_options.cuda_graphs = !f.enforce_eager;
#ifdef FLOE_HAVE_NCCL
    if (ranks > 1) {
      auto connected = ConnectNcclGrid(links.grid, 0);
      if (!connected.ok()) return Failed("rank_connect_failed", connected.status());
      links.nccl = std::move(connected).value();
      cuda_options.communicator = timing(links.nccl.world.get());
      cuda_options.sequence_parallel_size = f.sequence_parallel_size;
      cuda_options.sequence_group = timing(links.nccl.sequence.get());
      cuda_options.tensor_group = timing(links.nccl.tensor.get());
    }
#endif
    auto cuda = MakeCudaBackend(config, checkpoint.weights(), f, made.kv_dtype, server, cuda_options);
    if (!cuda.ok()) return Failed("backend_failed", cuda.status());
    made.weight_bytes = static_cast<int64_t>(cuda->backend->WeightBytes());
    made.kv_block_bytes = static_cast<int64_t>(cuda->backend->KvBytesPerBlock(f.block_size));
    made.device_kv_bytes = cuda->kv_cache_bytes;
    made.gpu_name = cuda->backend->device_name();
    startup.Phase("upload_weights");
    made.backend = std::move(cuda->backend);
#endif
  } else {
    auto cpu = MakeCpuBackend(f, plan.threads, checkpoint, made.kv_dtype, timing(links.grid.world.get()),
                              timing(links.grid.sequence.get()), timing(links.grid.tensor.get()));
    if (!cpu.ok()) return Failed("backend_failed", cpu.status());
    made.cache_outcome = (*cpu)->weight_cache().outcome;
    startup.Phase(made.cache_outcome == WeightCacheReport::Outcome::kHit ? "map_weights" : "repack");
    LogWeightCache(**cpu, 0);
    made.weight_bytes = static_cast<int64_t>((*cpu)->WeightBytes());
    made.kv_block_bytes = static_cast<int64_t>((*cpu)->KvBytesPerBlock(f.block_size));
    made.backend = std::move(cpu).value();
  }
  made.hardware = plan.device.device == Device::kCpu                 ? CpuRankThread()
                  : made.gpu_name.find("H200") != std::string::npos ? H200Sxm()
                                                                     : H100Sxm();
  if (ranks > 1) {
    ShiftPolicy& policy = plan.policy;
    const Grid grid{f.tensor_parallel_size, f.sequence_parallel_size};
    policy.threshold = f.shift_threshold > 0 ? f.shift_threshold : PredictShiftThreshold(config, made.hardware, grid);
    LogEvent(LogLevel::kInfo, "worker", "parallel_layout",
             {{"tensor_parallel_size", static_cast<int64_t>(f.tensor_parallel_size)},
              {"sequence_parallel_size", static_cast<int64_t>(f.sequence_parallel_size)},
              {"parallel_mode", f.parallel_mode},
              {"shift_threshold", policy.threshold},
              {"shift_threshold_from", std::string(!policy.profile.empty() ? "unused: profile"
                                                   : f.shift_threshold > 0 ? "flag"
                                                                           : "cost_model")},
              {"shift_profile", f.shift_profile},
              {"shift_profile_modes", DescribeShiftProfile(policy.profile)},
              {"rank0_weight_bytes", made.weight_bytes}});
    made.backend = std::make_unique<LeaderBackend>(
        std::move(made.backend), *links.grid.world,
        [on_rank_failure](const absl::Status& s) { on_rank_failure(std::string(s.message()), LostRank(s)); }, policy,
        made.parallel_stats);
  }
  return made;
}

int RunFollowerRank(const WorkerFlags& f, const WorkerPlan& plan, std::shared_ptr<grpc::ChannelCredentials> credentials,
                    std::shared_ptr<const InternalTrust> internal_trust) {
  auto checkpoint = Checkpoint::Load(f.model, plan.load);
  if (!checkpoint.ok()) return FollowerFailed("load_failed", checkpoint.status(), f.rank);
  std::unique_ptr<RemoteRankStore> store;
  if (!f.rank_store.empty())
    store = std::make_unique<RemoteRankStore>(f.rank_store, std::move(credentials), std::move(internal_trust));
  auto grid = ConnectGlooGrid({.rank = f.rank,
                               .size = plan.ranks,
                               .store_dir = f.rank_dir,
                               .store = store.get(),
                               .hostname = f.rank_host},
                              f.sequence_parallel_size);
  if (!grid.ok()) return FollowerFailed("rank_connect_failed", grid.status(), f.rank);
  auto device = AgreeOnDevice(*grid->world, plan.device.device, plan.support, plan.ranks);
  if (!device.ok()) return FollowerFailed("rank_connect_failed", device.status(), f.rank);
  const cpu::KvDtype kv_dtype = ResolveKvCacheDtype(f, *device, (*checkpoint)->config(), (*checkpoint)->weights());
  if (*device == Device::kCuda) {
#if defined(FLOE_HAVE_CUDA) && defined(FLOE_HAVE_NCCL)
    const int gpu = f.rank % std::max(1, plan.support.visible_gpus);
    auto nccl = ConnectNcclGrid(*grid, gpu);
    if (!nccl.ok()) return FollowerFailed("rank_connect_failed", nccl.status(), f.rank);
    auto cuda = MakeCudaBackend((*checkpoint)->config(), (*checkpoint)->weights(), f, kv_dtype, nullptr,
                                {.device = gpu,
                                 .communicator = nccl->world.get(),
                                 .sequence_parallel_size = f.sequence_parallel_size,
                                 .sequence_group = nccl->sequence.get(),
                                 .tensor_group = nccl->tensor.get()});
    if (!cuda.ok()) return FollowerFailed("backend_failed", cuda.status(), f.rank);
    // Rank 0 sizes the KV cache (the same on every rank): this rank's own
    // budget is not used.
    return Follow(*cuda->backend, static_cast<int64_t>(cuda->backend->WeightBytes()), *grid->world, f.rank);
#else
    return FollowerFailed("backend_failed", absl::FailedPreconditionError("built without CUDA and NCCL"), f.rank);
#endif
  }
  auto cpu = MakeCpuBackend(f, plan.threads, **checkpoint, kv_dtype, grid->world.get(), grid->sequence.get(),
                            grid->tensor.get());
  if (!cpu.ok()) return FollowerFailed("backend_failed", cpu.status(), f.rank);
  LogWeightCache(**cpu, f.rank);
  return Follow(**cpu, static_cast<int64_t>((*cpu)->WeightBytes()), *grid->world, f.rank);
}

}  // namespace floe
