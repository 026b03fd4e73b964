// floe-worker: serves one model's engine over the floe.v1.Worker API, on
// one rank or, with --tensor-parallel-size T and --sequence-parallel-size
// S, on a grid of T S ranks (Shift Parallelism, model/parallel_layout.h):
// this process is rank 0 (engine, gRPC) and starts ranks 1..TS-1 as child
// processes of the same binary (--rank R --rank-dir DIR), which run only
// their shard of the model (services/worker/backend/rank_group.h); with
// --rank-launch remote it waits for ranks started elsewhere instead, which
// meet through the store it serves on its port (--rank-store).
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/auth/api_keys.h"
#include "common/cli/arg_parser.h"
#include "common/log/log.h"
#include "common/log/startup_clock.h"
#include "common/metrics/metrics_server.h"
#include "common/rpc/server_runner.h"
#include "common/rpc/termination_signal.h"
#include "common/rpc/tls.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/backend/device_choice.h"
#include "services/worker/backend/rank_group.h"
#include "services/worker/parallel/cost_model.h"
#include "services/worker/parallel/gloo_communicator.h"
#include "services/worker/parallel/rank_store.h"
#include "services/worker/parallel/timed_communicator.h"
#include "services/worker/engine/engine.h"
#include "services/worker/speculation/make_proposers.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/worker_service.h"
#ifdef FLOE_HAVE_CUDA
#include "kernels/cuda/model_kernels.h"
#include "services/worker/backend/cuda_backend.h"
#endif
#ifdef FLOE_HAVE_NCCL
#include "services/worker/parallel/nccl_communicator.h"
#endif

namespace floe {
namespace {

struct WorkerFlags {
  std::string model;
  std::string model_name;
  std::string load_format = "auto";
  std::string weight_cache = "auto";  // auto: MODEL/.floe-cache; off: none
  double weight_cache_max_gb = 64;
  std::string dummy_dtype = "bf16";
  std::string host = "127.0.0.1";
  int port = 0;
  int threads = 0;
  int block_size = 16;
  double kv_cache_gb = 1.0;
  std::string device = "auto";
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  int max_num_batched_tokens = 512;
  int max_num_seqs = 64;
  int max_waiting = 256;
  int max_model_len = 0;
  int max_tokens_limit = 4096;
  bool no_prefix_caching = false;
  int drain_timeout_s = 30;
  std::string speculative;  // empty: suffix with --suffix-cache, otherwise off
  std::string speculator;
  std::string speculative_selection = "acceptance";
  int num_speculative_tokens = 32;
  int speculative_token_threshold = 512;
  double speculative_step_overhead_tokens = 1.0;
  std::string speculative_cost_curve = "auto";
  std::string suffix_cache;
  bool benchmark_forced_decoding = false;
  bool speculative_tree = false;
  bool speculative_reference_compatible = false;
  std::string speculative_default_namespace;
  int metrics_port = 0;
  int tensor_parallel_size = 1;
  int sequence_parallel_size = 1;
  int threads_per_rank = 0;
  std::string parallel_mode;  // empty: shift with S > 1, else tp
  int64_t shift_threshold = 0;  // 0: from the cost model
  std::string shift_profile;    // bench_shift JSON: the measured faster mode per step size
  int rank = 0;          // internal: > 0 in the ranks rank 0 starts
  std::string rank_dir;  // internal: their rendezvous folder
  // Ranks started elsewhere (another pod or machine): rank 0 does not fork
  // them and serves the rendezvous store on its port; they find it there.
  std::string rank_launch = "local";
  std::string rank_store;
  std::string rank_host = "127.0.0.1";
  TlsOptions tls;
  std::string admin_key_file;
  bool reflection = false;
};

// The weight cache folder --weight-cache names ("" for off).
std::string WeightCacheDir(const WorkerFlags& f) {
  if (f.weight_cache == "off") return "";
  if (f.weight_cache == "auto") return (std::filesystem::path(f.model) / ".floe-cache").string();
  return f.weight_cache;
}

uint64_t WeightCacheMaxBytes(const WorkerFlags& f) {
  return static_cast<uint64_t>(f.weight_cache_max_gb * static_cast<double>(uint64_t{1} << 30));
}

const char* OutcomeName(WeightCacheReport::Outcome outcome) {
  static constexpr const char* kNames[] = {"off", "hit", "written", "failed"};
  return kNames[static_cast<int>(outcome)];
}

// Logs what the weight cache did.
void LogWeightCache(const CpuBackend& backend, int rank) {
  const WeightCacheReport& r = backend.weight_cache();
  if (r.outcome != WeightCacheReport::Outcome::kOff) {
    LogEvent(r.outcome == WeightCacheReport::Outcome::kFailed ? LogLevel::kWarning : LogLevel::kInfo, "worker",
             "weight_cache",
             {{"rank", static_cast<int64_t>(rank)},
              {"outcome", std::string(OutcomeName(r.outcome))},
              {"path", r.path},
              {"detail", r.detail},
              {"evicted", absl::StrJoin(r.evicted, ",")}});
  }
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
                                                const WorkerFlags& f, ServerRunner* server,
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

#ifdef FLOE_HAVE_NCCL
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
#endif

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

// Ranks 1..T-1: load, meet the group, run the leader's steps until it stops
// them (exit 0) or the group fails (exit 1). They die with rank 0 (PDEATHSIG).
int RunRank(const WorkerFlags& f, const LoadOptions& load, int threads, const DeviceChoice& choice,
            const DeviceSupport& support) {
  const int gpus = support.visible_gpus;
  auto failed = [&](const char* event, const absl::Status& status) {
    LogEvent(LogLevel::kError, "worker", event,
             {{"rank", static_cast<int64_t>(f.rank)}, {"error", std::string(status.message())}});
    return 1;
  };
  auto checkpoint = Checkpoint::Load(f.model, load);
  if (!checkpoint.ok()) return failed("load_failed", checkpoint.status());
  auto credentials = MakeChannelCredentials(f.tls);
  if (!credentials.ok()) return failed("tls_failed", credentials.status());
  std::unique_ptr<RemoteRankStore> store;
  if (!f.rank_store.empty()) store = std::make_unique<RemoteRankStore>(f.rank_store, *credentials);
  auto grid = ConnectGlooGrid({.rank = f.rank,
                               .size = f.tensor_parallel_size * f.sequence_parallel_size,
                               .store_dir = f.rank_dir,
                               .store = store.get(),
                               .hostname = f.rank_host},
                              f.sequence_parallel_size);
  if (!grid.ok()) return failed("rank_connect_failed", grid.status());
  auto device = AgreeOnDevice(*grid->world, choice.device, support, f.tensor_parallel_size * f.sequence_parallel_size);
  if (!device.ok()) return failed("rank_connect_failed", device.status());
  if (*device == Device::kCuda) {
#if defined(FLOE_HAVE_CUDA) && defined(FLOE_HAVE_NCCL)
    const int gpu = f.rank % std::max(1, gpus);
    auto nccl = ConnectNcclGrid(*grid, gpu);
    if (!nccl.ok()) return failed("rank_connect_failed", nccl.status());
    auto made = MakeCudaBackend((*checkpoint)->config(), (*checkpoint)->weights(), f, nullptr,
                                {.device = gpu,
                                 .communicator = nccl->world.get(),
                                 .sequence_parallel_size = f.sequence_parallel_size,
                                 .sequence_group = nccl->sequence.get(),
                                 .tensor_group = nccl->tensor.get()});
    if (!made.ok()) return failed("backend_failed", made.status());
    // Rank 0 sizes the KV cache (the same on every rank): this rank's own
    // budget is not used.
    LogEvent(LogLevel::kInfo, "worker", "rank_ready",
             {{"rank", static_cast<int64_t>(f.rank)},
              {"weight_bytes", static_cast<int64_t>(made->backend->WeightBytes())}});
    const absl::Status status = RunFollower(*made->backend, *grid->world);
    LogEvent(status.ok() ? LogLevel::kInfo : LogLevel::kError, "worker", "rank_stopped",
             {{"rank", static_cast<int64_t>(f.rank)}, {"status", status.ToString()}});
    return status.ok() ? 0 : 1;
#else
    (void)gpus;
    return failed("backend_failed", absl::FailedPreconditionError("built without CUDA and NCCL"));
#endif
  }
  auto backend = CpuBackend::Create((*checkpoint)->config(), (*checkpoint)->weights(),
                                    {.num_threads = threads,
                                     .communicator = grid->world.get(),
                                     .sequence_parallel_size = f.sequence_parallel_size,
                                     .sequence_group = grid->sequence.get(),
                                     .tensor_group = grid->tensor.get(),
                                     .weight_cache_dir = WeightCacheDir(f),
                                     .weights_fingerprint = (*checkpoint)->fingerprint(),
                                     .weight_cache_max_bytes = WeightCacheMaxBytes(f),
                                     .release_source_pages = [&] { (*checkpoint)->ReleasePages(); }});
  if (!backend.ok()) return failed("backend_failed", backend.status());
  LogWeightCache(**backend, f.rank);
  LogEvent(LogLevel::kInfo, "worker", "rank_ready",
           {{"rank", static_cast<int64_t>(f.rank)}, {"weight_bytes", static_cast<int64_t>((*backend)->WeightBytes())}});
  const absl::Status status = RunFollower(**backend, *grid->world);
  LogEvent(status.ok() ? LogLevel::kInfo : LogLevel::kError, "worker", "rank_stopped",
           {{"rank", static_cast<int64_t>(f.rank)}, {"status", status.ToString()}});
  return status.ok() ? 0 : 1;
}

// Starts ranks 1..T-1 (this binary, the same flags plus --rank and
// --rank-dir); their pids by rank (index 0 unused).
absl::StatusOr<std::vector<pid_t>> StartRanks(int argc, char** argv, const WorkerFlags& f) {
  const int ranks = f.tensor_parallel_size * f.sequence_parallel_size;
  std::vector<pid_t> pids(ranks, -1);
  for (int r = 1; r < ranks; ++r) {
    // Everything the child needs is built before fork: other threads run
    // (gRPC), so the child may only make async-signal-safe calls until exec.
    std::vector<std::string> args(argv, argv + argc);
    args.insert(args.end(), {"--rank", std::to_string(r), "--rank-dir", f.rank_dir, "--metrics-port", "-1"});
    std::vector<char*> cargs;
    for (std::string& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive rank 0
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDOUT_FILENO);  // stdout lines are rank 0's
      execv("/proc/self/exe", cargs.data());
      _exit(127);
    }
    pids[r] = pid;
  }
  return pids;
}

int Run(int argc, char** argv) {
  TerminationSignal termination;  // before any thread starts
  StartupClock startup("worker");
  WorkerFlags f;
  ArgParser parser("floe-worker --model DIR [options]",
                   "Serves a Hugging Face checkpoint folder over the floe.v1.Worker gRPC API on the CPU backend.\n"
                   "Prints 'worker listening on HOST:PORT' once the port is bound; health turns SERVING once the\n"
                   "model is loaded. SIGTERM drains: NOT_SERVING, running requests finish, then exit.");
  parser.AddString("model", &f.model, "checkpoint folder (config.json + safetensors)");
  parser.AddString("model-name", &f.model_name, "name clients use (default: the folder's name)");
  parser.AddString("load-format", &f.load_format, "auto|safetensors|dummy (dummy: seeded random weights from config.json)");
  parser.AddString("dummy-dtype", &f.dummy_dtype, "weight dtype of --load-format dummy: bf16|f32");
  parser.AddString("weight-cache", &f.weight_cache,
                   "folder for repacked weights, mapped instead of repacked on the next start: "
                   "auto (MODEL/.floe-cache) | off | DIR");
  parser.AddDouble("weight-cache-max-gb", &f.weight_cache_max_gb,
                    "bound of the weight cache folder: writing a file first deletes the least recently used "
                    "ones (not those used in the last 10 minutes) until all fit");
  parser.AddString("host", &f.host, "address to bind");
  parser.AddInt("port", &f.port, "port to bind (0: any free port)");
  parser.AddInt("threads", &f.threads, "compute threads (0: all cores)");
  parser.AddInt("block-size", &f.block_size, "KV cache block size in tokens");
  parser.AddDouble("kv-cache-gb", &f.kv_cache_gb, "KV cache memory budget in GiB (--device cpu)");
  parser.AddString("device", &f.device,
                   "auto|cpu|cuda: where the model runs (auto: cuda where this build has it and this machine has "
                   "a GPU per rank, rank r on GPU r; the 'device' log line says which and why)");
  parser.AddDouble("gpu-memory-utilization", &f.gpu_memory_utilization,
                   "--device cuda: the share of the GPU's memory this worker may use (weights, activations and the "
                   "KV cache, which gets the rest), as vLLM's");
  parser.AddBool("enforce-eager", &f.enforce_eager,
                 "--device cuda: run every step eagerly (no CUDA graphs for decode steps), as vLLM's");
  parser.AddInt("max-num-batched-tokens", &f.max_num_batched_tokens, "token budget of one engine step");
  parser.AddInt("max-num-seqs", &f.max_num_seqs, "most sequences in one batch");
  parser.AddInt("max-waiting", &f.max_waiting, "bound of the waiting queue (beyond: RESOURCE_EXHAUSTED)");
  parser.AddInt("max-model-len", &f.max_model_len, "context limit (0: the model's)");
  parser.AddInt("max-tokens-limit", &f.max_tokens_limit, "largest max_tokens a request may ask for");
  parser.AddBool("no-prefix-caching", &f.no_prefix_caching, "disable automatic prefix caching");
  parser.AddInt("drain-timeout-s", &f.drain_timeout_s, "seconds SIGTERM waits for running requests");
  parser.AddString("speculative", &f.speculative,
                   "speculative decoding (lossless): off|ngram|suffix|lstm|suffix+lstm (default: suffix with "
                   "--suffix-cache, else off)");
  parser.AddString("speculator", &f.speculator,
                   "--speculative lstm|suffix+lstm: an Arctic speculator folder (config.json + model.safetensors)");
  parser.AddString("speculative-selection", &f.speculative_selection,
                   "suffix+lstm: which draft a sequence verifies: acceptance (measured per request; default) | score");
  parser.AddBool("speculative-tree", &f.speculative_tree,
                 "--speculative suffix: draft trees (k nodes, verified in one pass under a tree mask)");
  parser.AddBool("speculative-reference-compatible", &f.speculative_reference_compatible,
                 "--speculative suffix: Arctic Inference's drafts exactly (default: Floe's drafting mode, "
                 "docs/suffix-cache.md)");
  parser.AddString("speculative-default-namespace", &f.speculative_default_namespace,
                   "suffix-tree namespace of requests that name none (default: the shared default namespace)");
  parser.AddInt("num-speculative-tokens", &f.num_speculative_tokens,
                "draft tokens per sequence per step, at most (the cost model trims; <= 64)");
  parser.AddInt("speculative-token-threshold", &f.speculative_token_threshold,
                "a step verifies at most (this - its other tokens) drafts; none at or above it");
  parser.AddString("speculative-cost-curve", &f.speculative_cost_curve,
                   "the step cost curve the draft budget plans on: measure (a few forward passes at start), "
                   "roofline (--device cuda: from the GPU's bandwidth and bf16 rate, no passes), "
                   "linear (--speculative-step-overhead-tokens + tokens), a JSON file "
                   "{\"step_cost_curve\": [[tokens, ms], ...]} (bench_verify_cost --write-curve), "
                   "or auto: roofline on an H100 or H200, measure elsewhere (a file named auto, measure, "
                   "roofline or linear: ./NAME)");
  parser.AddDouble("speculative-step-overhead-tokens", &f.speculative_step_overhead_tokens,
                   "--speculative-cost-curve linear: a step's fixed cost in tokens' worth of compute; "
                   "< 0: no cost model (threshold only)");
  parser.AddString("suffix-cache", &f.suffix_cache,
                   "--speculative suffix only: floe-suffix-cache HOST:PORT,... for the global tree");
  parser.AddBool("benchmark-forced-decoding", &f.benchmark_forced_decoding,
                 "benchmarks only: requests may carry forced_output_ids, emitted instead of sampled tokens");
  parser.AddInt("metrics-port", &f.metrics_port, "Prometheus /metrics port (0: any free port; -1: off)");
  AddTlsFlags(parser, &f.tls);
  parser.AddString("admin-key-file", &f.admin_key_file,
                   "keys for the admin call Worker.Abort (lines \"SHA256_HEX TENANT admin\"); without it Abort is open");
  parser.AddBool("reflection", &f.reflection, "serve gRPC server reflection (off: it lists every method to any caller)");
  parser.AddInt("tensor-parallel-size", &f.tensor_parallel_size,
                "T: the model's weights are sharded over T ranks (processes; rank 0 is this one)");
  parser.AddInt("sequence-parallel-size", &f.sequence_parallel_size,
                "S: T x S ranks; a step runs Ulysses SP over S (its rows split, attention by heads) with TP over "
                "T inside, or TP over all T x S ranks (--parallel-mode)");
  parser.AddString("parallel-mode", &f.parallel_mode,
                   "tp|sp|shift: every step TP over all ranks, every step SP x TP, or per step by its scheduled "
                   "tokens (default: shift with S > 1)");
  parser.AddInt64("shift-threshold", &f.shift_threshold,
                  "shift: steps of at least this many scheduled tokens run SP x TP (0: from the cost model)");
  parser.AddString("shift-profile", &f.shift_profile,
                   "shift: each step runs the mode measured faster at its size in this bench_shift output "
                   "(JSON) instead of one threshold");
  parser.AddInt("threads-per-rank", &f.threads_per_rank,
                "compute threads of each rank with several ranks (0: cores / ranks)");
  parser.AddInt("rank", &f.rank, "internal: this process's rank (set by rank 0 for the ranks it starts)");
  parser.AddString("rank-dir", &f.rank_dir, "internal: the ranks' rendezvous folder (set by rank 0)");
  parser.AddString("rank-launch", &f.rank_launch,
                   "local|remote: rank 0 starts the other ranks as child processes, or waits for ranks started "
                   "elsewhere (each: the same flags plus --rank R --rank-store RANK0_HOST:PORT --rank-host ITS_IP)");
  parser.AddString("rank-store", &f.rank_store,
                   "ranks > 0 started elsewhere: rank 0's worker address, where they meet the others");
  parser.AddString("rank-host", &f.rank_host, "the address this rank's collectives listen on (its pod IP)");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe-worker")) return *exit_code;
  if (f.model.empty()) {
    std::fprintf(stderr, "floe-worker: --model is required (see --help)\n");
    return 2;
  }
  if (f.model_name.empty()) f.model_name = std::filesystem::path(f.model).filename().string();
  if (absl::Status s = ValidateTlsOptions(f.tls); !s.ok()) {
    std::fprintf(stderr, "floe-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  LoadOptions load;
  if (f.load_format == "dummy") {
    load.format = LoadFormat::kDummy;
  } else if (f.load_format == "safetensors") {
    load.format = LoadFormat::kSafetensors;
  } else if (f.load_format != "auto") {
    std::fprintf(stderr, "floe-worker: --load-format must be auto, safetensors or dummy\n");
    return 2;
  }
  auto dummy_dtype = ParseDTypeName(f.dummy_dtype);
  if (!dummy_dtype.ok()) {
    std::fprintf(stderr, "floe-worker: --dummy-dtype: %s\n", std::string(dummy_dtype.status().message()).c_str());
    return 2;
  }
  load.dummy_dtype = *dummy_dtype;
  if (f.tensor_parallel_size < 1 || f.tensor_parallel_size > 64) {
    std::fprintf(stderr, "floe-worker: --tensor-parallel-size must be in [1, 64], got %d\n", f.tensor_parallel_size);
    return 2;
  }
  if (f.sequence_parallel_size < 1 || f.sequence_parallel_size > 64) {
    std::fprintf(stderr, "floe-worker: --sequence-parallel-size must be in [1, 64], got %d\n",
                 f.sequence_parallel_size);
    return 2;
  }
  const int ranks = f.tensor_parallel_size * f.sequence_parallel_size;
  if (ranks > 64) {
    std::fprintf(stderr, "floe-worker: --tensor-parallel-size %d x --sequence-parallel-size %d = %d ranks, at most 64\n",
                 f.tensor_parallel_size, f.sequence_parallel_size, ranks);
    return 2;
  }
  if (f.parallel_mode.empty()) f.parallel_mode = f.sequence_parallel_size > 1 ? "shift" : "tp";
  ShiftPolicy policy;
  if (auto pin = ParseParallelMode(f.parallel_mode); pin.ok()) {
    policy.pin = *pin;
  } else {
    std::fprintf(stderr, "floe-worker: --parallel-mode: %s\n", std::string(pin.status().message()).c_str());
    return 2;
  }
  std::vector<std::pair<int, double>> cost_curve;
  const bool named_curve = f.speculative_cost_curve == "auto" || f.speculative_cost_curve == "measure" ||
                           f.speculative_cost_curve == "roofline" || f.speculative_cost_curve == "linear";
  if (!named_curve) {
    auto curve = StepCostCurve::Load(f.speculative_cost_curve);
    if (!curve.ok()) {
      std::fprintf(stderr, "floe-worker: --speculative-cost-curve: %s\n", std::string(curve.status().message()).c_str());
      return 2;
    }
    cost_curve = curve->points();
  }
  if (f.shift_threshold < 0) {
    std::fprintf(stderr, "floe-worker: --shift-threshold must be >= 0, got %lld\n",
                 static_cast<long long>(f.shift_threshold));
    return 2;
  }
  if (!f.shift_profile.empty()) {
    if (policy.pin != ShiftPolicy::Pin::kShift || f.sequence_parallel_size == 1 || f.shift_threshold > 0) {
      std::fprintf(stderr, "floe-worker: --shift-profile needs --parallel-mode shift, --sequence-parallel-size > 1 "
                           "and no --shift-threshold\n");
      return 2;
    }
    // Only rank 0 chooses modes; the other ranks (maybe on machines
    // without the file) get the flags as they are and ignore it.
    absl::StatusOr<std::vector<ShiftProfilePoint>> profile = std::vector<ShiftProfilePoint>{};
    if (f.rank == 0) profile = LoadShiftProfile(f.shift_profile);
    if (!profile.ok()) {
      std::fprintf(stderr, "floe-worker: --shift-profile: %s\n", std::string(profile.status().message()).c_str());
      return 2;
    }
    policy.profile = *std::move(profile);
  }
  // With S = 1 both modes are TP.
  if (f.sequence_parallel_size == 1) policy.pin = ShiftPolicy::Pin::kTensor;
  const int threads = ranks == 1 ? f.threads
                      : f.threads_per_rank > 0
                          ? f.threads_per_rank
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
  if (!(f.weight_cache_max_gb >= 0) || f.weight_cache_max_gb > 1e6) {
    std::fprintf(stderr, "floe-worker: --weight-cache-max-gb must be in [0, 1e6], got %g\n", f.weight_cache_max_gb);
    return 2;
  }
#ifdef FLOE_HAVE_CUDA
  constexpr bool kBuiltWithCuda = true;
  const int visible_gpus = f.device == "cpu" ? 0 : cuda::DeviceCount();
#else
  constexpr bool kBuiltWithCuda = false;
  const int visible_gpus = 0;
#endif
#ifdef FLOE_HAVE_NCCL
  constexpr bool kBuiltWithNccl = true;
#else
  constexpr bool kBuiltWithNccl = false;
#endif
  // Ranks started elsewhere (--rank-launch remote, --rank-store) bring their own GPU.
  const int ranks_here = f.rank_launch == "remote" || !f.rank_store.empty() ? 1 : ranks;
  const DeviceSupport support{kBuiltWithCuda, kBuiltWithNccl, visible_gpus};
  auto device = ChooseDevice(f.device, support, ranks, ranks_here);
  if (!device.ok()) {
    std::fprintf(stderr, "floe-worker: %s\n", std::string(device.status().message()).c_str());
    return 2;
  }
  if (f.speculative_cost_curve == "roofline" && device->device != Device::kCuda) {
    std::fprintf(stderr, "floe-worker: --speculative-cost-curve roofline needs a GPU backend (--device cuda); "
                         "the CPU measures its curve (measure)\n");
    return 2;
  }
  if (!(f.gpu_memory_utilization > 0 && f.gpu_memory_utilization <= 1)) {
    std::fprintf(stderr, "floe-worker: --gpu-memory-utilization must be in (0, 1], got %g\n",
                 f.gpu_memory_utilization);
    return 2;
  }
  if (f.rank > 0) {
    if (f.rank >= ranks || f.rank_dir.empty() == f.rank_store.empty()) {
      std::fprintf(stderr, "floe-worker: --rank %d needs one of --rank-dir and --rank-store, and more than %d ranks\n",
                   f.rank, f.rank);
      return 2;
    }
    return RunRank(f, load, threads, *device, support);
  }
  if (f.speculative.empty()) f.speculative = f.suffix_cache.empty() ? "off" : "suffix";
  SpeculationConfig speculation{f.speculative, f.num_speculative_tokens, {}, 5};
  if (f.speculative_selection != "acceptance" && f.speculative_selection != "score") {
    std::fprintf(stderr, "floe-worker: --speculative-selection must be acceptance or score, got \"%s\"\n",
                 f.speculative_selection.c_str());
    return 2;
  }
  speculation.speculator_dir = f.speculator;
  // 0 threads: all cores, as the backend reads it.
  speculation.speculator_threads =
      threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (!f.speculator.empty()) {
    // The speculator must fit the served model: its config.json is enough.
    auto target = ModelConfig::FromFile(f.model + "/config.json");
    if (!target.ok()) {
      std::fprintf(stderr, "floe-worker: --model: %s\n", std::string(target.status().message()).c_str());
      return 2;
    }
    speculation.target_hidden_size = target->hidden_size;
    speculation.target_vocab_size = target->vocab_size;
    speculation.target_name = f.model;
  }
  speculation.credentials = *MakeChannelCredentials(f.tls);  // validated above
  speculation.tree = f.speculative_tree;
  speculation.reference_compatible = f.speculative_reference_compatible;
  if (!f.suffix_cache.empty()) {
    speculation.suffix_cache_addresses = absl::StrSplit(f.suffix_cache, ',');
    if (f.speculative == "suffix" || f.speculative == "suffix+lstm")
      speculation.suffix_cache_stats = std::make_shared<RemoteSuffixStats>(speculation.suffix_cache_addresses);
  }
  auto proposers = MakeProposers(speculation);
  if (!proposers.ok()) {
    std::fprintf(stderr, "floe-worker: %s\n", std::string(proposers.status().message()).c_str());
    return 2;
  }

  WorkerService service;
  std::optional<ApiKeys> admin_keys;
  if (!f.admin_key_file.empty()) {
    auto loaded = ApiKeys::Load(f.admin_key_file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "floe-worker: --admin-key-file: %s\n", std::string(loaded.status().message()).c_str());
      return 2;
    }
    admin_keys = *std::move(loaded);
    service.SetAdminKeys(&*admin_keys);
  } else {
    LogEvent(LogLevel::kWarning, "worker", "admin_calls_open", {{"why", "no --admin-key-file: Worker.Abort needs no key"}});
  }
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<WorkerMetrics> metrics;
  if (f.metrics_port >= 0) {
    auto started = MetricsServer::Start({.host = f.host,
                                          .port = f.metrics_port,
                                          .tls_cert_file = f.tls.cert_file,
                                          .tls_key_file = f.tls.key_file,
                                          .tls_client_ca_file = f.tls.client_ca_file});
    if (!started.ok()) {
      LogEvent(LogLevel::kError, "worker", "metrics_failed", {{"error", std::string(started.status().message())}});
      return 1;
    }
    metrics_server = std::move(started).value();
    std::printf("metrics worker %s\n", metrics_server->url().c_str());
  }
  if (f.rank_launch != "local" && f.rank_launch != "remote") {
    std::fprintf(stderr, "floe-worker: --rank-launch must be local or remote, got %s\n", f.rank_launch.c_str());
    return 2;
  }
  const bool remote_ranks = ranks > 1 && f.rank_launch == "remote";
  startup.Phase("init");
  RankStoreService rank_store;
  std::vector<grpc::Service*> services = {&service};
  if (remote_ranks) services.push_back(&rank_store);
  ServerOptions server_options;
  server_options.address = absl::StrCat(f.host, ":", f.port);
  server_options.tls = f.tls;
  server_options.reflection = f.reflection;
  auto runner = ServerRunner::Start(server_options, services);
  if (!runner.ok()) {
    LogEvent(LogLevel::kError, "worker", "listen_failed", {{"error", std::string(runner.status().message())}});
    return 1;
  }
  std::printf("worker listening on %s\n", (*runner)->address().c_str());
  std::fflush(stdout);
  startup.Phase("grpc_start");
  LogEvent(LogLevel::kInfo, "worker", "device", {{"device", std::string(DeviceName(device->device))}, {"why", device->why}});
  LogEvent(LogLevel::kInfo, "worker", "loading", {{"model", f.model}, {"load_format", f.load_format}});

  // Tensor parallel: start the other ranks now, so they load while we do.
  // Shared with the detached watcher thread, which may outlive this frame.
  struct RankWatch {
    std::vector<pid_t> pids;
    std::atomic<bool> stopping{false};
  };
  auto watch = std::make_shared<RankWatch>();
  ServerRunner* server = runner->get();
  auto rank_failed = [server](const std::string& why, int64_t rank) {
    // The ranks are out of step for good: stop serving, exit non-zero (the
    // supervisor restarts the worker; the router ejects it meanwhile).
    server->SetServing(false);
    LogEvent(LogLevel::kError, "worker", "rank_failed", {{"rank", rank}, {"error", why}});
    std::_Exit(1);
  };
  if (remote_ranks) {
    LogEvent(LogLevel::kInfo, "worker", "waiting_for_ranks",
             {{"ranks", static_cast<int64_t>(ranks - 1)}, {"rank_store", (*runner)->address()}});
  } else if (ranks > 1) {
    char dir_template[] = "/tmp/floe-ranks-XXXXXX";
    if (!mkdtemp(dir_template)) {
      LogEvent(LogLevel::kError, "worker", "rank_dir_failed", {{"error", std::string(std::strerror(errno))}});
      return 1;
    }
    f.rank_dir = dir_template;
    auto pids = StartRanks(argc, argv, f);
    if (!pids.ok()) {
      LogEvent(LogLevel::kError, "worker", "ranks_failed", {{"error", std::string(pids.status().message())}});
      return 1;
    }
    watch->pids = *pids;
    for (int r = 1; r < ranks; ++r) {
      std::printf("rank %d pid %d\n", r, static_cast<int>(watch->pids[r]));
      LogEvent(LogLevel::kInfo, "worker", "rank_started",
               {{"rank", static_cast<int64_t>(r)}, {"pid", static_cast<int64_t>(watch->pids[r])}});
    }
    std::fflush(stdout);
    // A rank that exits while we serve (killed, crashed) fails the worker at
    // once, even idle; once stopping, exits are expected. Detached: an early
    // return (a failed load) must not wait for it.
    std::thread([watch, rank_failed, ranks] {
      for (int alive = ranks - 1; alive > 0; --alive) {
        int status = 0;
        const pid_t pid = waitpid(-1, &status, 0);
        if (pid <= 0) return;
        const int64_t rank = std::find(watch->pids.begin(), watch->pids.end(), pid) - watch->pids.begin();
        if (!watch->stopping.load())
          rank_failed(absl::StrCat("rank process ", pid, " exited (status ", status, ")"), rank);
      }
    }).detach();
  }

  auto checkpoint = Checkpoint::Load(f.model, load);
  if (!checkpoint.ok()) {
    LogEvent(LogLevel::kError, "worker", "load_failed", {{"error", std::string(checkpoint.status().message())}});
    return 1;
  }
  startup.Phase("read");
  const ModelConfig& config = (*checkpoint)->config();
  // Rank 0's communicators, each timed for the collective-time metric (the
  // LeaderBackend's plan broadcasts go around the timing).
  auto parallel_stats = std::make_shared<ParallelStats>();
  GlooGrid grid;
  std::vector<std::unique_ptr<TimedCommunicator>> timed;
  auto timing = [&](Communicator* c) -> Communicator* {
    if (!c) return nullptr;
    timed.push_back(std::make_unique<TimedCommunicator>(*c, parallel_stats->collective_ns));
    return timed.back().get();
  };
  if (ranks > 1) {
    auto connected = ConnectGlooGrid({.rank = 0,
                                      .size = ranks,
                                      .store_dir = f.rank_dir,
                                      .store = remote_ranks ? &rank_store.Local() : nullptr,
                                      .hostname = f.rank_host},
                                     f.sequence_parallel_size);
    rank_store.Close();  // every rank has connected (or the worker gives up)
    if (!connected.ok()) {
      LogEvent(LogLevel::kError, "worker", "rank_connect_failed",
               {{"error", std::string(connected.status().message())}});
      return 1;
    }
    grid = std::move(connected).value();
    if (auto agreed = AgreeOnDevice(*grid.world, device->device, support, ranks); !agreed.ok()) {
      LogEvent(LogLevel::kError, "worker", "rank_connect_failed", {{"error", std::string(agreed.status().message())}});
      return 1;
    }
    startup.Phase("rank_connect");
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend;
  int64_t weight_bytes = 0, kv_block_bytes = 0;
  WeightCacheReport::Outcome cache_outcome = WeightCacheReport::Outcome::kOff;
  std::optional<int64_t> device_kv_bytes;  // --device cuda: what --gpu-memory-utilization leaves
  std::string gpu_name;  // the shift threshold's hardware model
#if defined(FLOE_HAVE_CUDA) && defined(FLOE_HAVE_NCCL)
  NcclGrid nccl;  // GPU ranks: the model's collectives (the Gloo world carries the plans)
#endif
  if (device->device == Device::kCuda) {
#ifdef FLOE_HAVE_CUDA
    CudaBackendOptions cuda_options;
    cuda_options.cuda_graphs = !f.enforce_eager;
#ifdef FLOE_HAVE_NCCL
    if (ranks > 1) {
      auto connected = ConnectNcclGrid(grid, 0);
      if (!connected.ok()) {
        LogEvent(LogLevel::kError, "worker", "rank_connect_failed",
                 {{"error", std::string(connected.status().message())}});
        return 1;
      }
      nccl = std::move(connected).value();
      cuda_options.communicator = timing(nccl.world.get());
      cuda_options.sequence_parallel_size = f.sequence_parallel_size;
      cuda_options.sequence_group = timing(nccl.sequence.get());
      cuda_options.tensor_group = timing(nccl.tensor.get());
    }
#endif
    auto made = MakeCudaBackend(config, (*checkpoint)->weights(), f, server, cuda_options);
    if (!made.ok()) {
      LogEvent(LogLevel::kError, "worker", "backend_failed", {{"error", std::string(made.status().message())}});
      return 1;
    }
    weight_bytes = static_cast<int64_t>(made->backend->WeightBytes());
    kv_block_bytes = static_cast<int64_t>(made->backend->KvBytesPerBlock(f.block_size));
    device_kv_bytes = made->kv_cache_bytes;
    gpu_name = made->backend->device_name();
    startup.Phase("upload_weights");
    backend = std::unique_ptr<Backend>(std::move(made->backend));
#endif
  } else {
    auto cpu = CpuBackend::Create(config, (*checkpoint)->weights(),
                                  {.num_threads = threads,
                                   .communicator = timing(grid.world.get()),
                                   .sequence_parallel_size = f.sequence_parallel_size,
                                   .sequence_group = timing(grid.sequence.get()),
                                   .tensor_group = timing(grid.tensor.get()),
                                   .weight_cache_dir = WeightCacheDir(f),
                                   .weights_fingerprint = (*checkpoint)->fingerprint(),
                                   .weight_cache_max_bytes = WeightCacheMaxBytes(f),
                                   .release_source_pages = [&] { (*checkpoint)->ReleasePages(); }});
    if (!cpu.ok()) {
      LogEvent(LogLevel::kError, "worker", "backend_failed", {{"error", std::string(cpu.status().message())}});
      return 1;
    }
    cache_outcome = (*cpu)->weight_cache().outcome;
    startup.Phase(cache_outcome == WeightCacheReport::Outcome::kHit ? "map_weights" : "repack");
    LogWeightCache(**cpu, 0);
    weight_bytes = static_cast<int64_t>((*cpu)->WeightBytes());
    kv_block_bytes = static_cast<int64_t>((*cpu)->KvBytesPerBlock(f.block_size));
    backend = std::unique_ptr<Backend>(std::move(cpu).value());
  }
  const Grid shape{f.tensor_parallel_size, f.sequence_parallel_size};
  const Hardware hardware = device->device == Device::kCpu                 ? CpuRankThread()
                            : gpu_name.find("H200") != std::string::npos ? H200Sxm()
                                                                          : H100Sxm();
  if (ranks > 1) {
    policy.threshold = f.shift_threshold > 0 ? f.shift_threshold : PredictShiftThreshold(config, hardware, shape);
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
              {"rank0_weight_bytes", weight_bytes}});
    backend = std::unique_ptr<Backend>(std::make_unique<LeaderBackend>(
        std::move(backend).value(), *grid.world,
        [rank_failed](const absl::Status& s) { rank_failed(std::string(s.message()), -1); }, policy,
        parallel_stats));
  }
  // auto: the roofline on a GPU whose figures the cost model has (H100,
  // H200); measured elsewhere.
  const bool known_gpu = gpu_name.find("H100") != std::string::npos || gpu_name.find("H200") != std::string::npos;
  if (f.speculative_cost_curve == "auto")
    f.speculative_cost_curve = device->device == Device::kCuda && known_gpu ? "roofline" : "measure";
  if (f.speculative_cost_curve == "roofline" && !proposers->empty()) {
    // Up to what a step may verify: the roofline's knee on a GPU lies far
    // past the 64 tokens a measurement runs.
    const int max_tokens = std::max(1, std::min(f.max_num_batched_tokens, f.speculative_token_threshold));
    cost_curve = RooflineStepCostCurve(config, hardware, shape, [&](int64_t n) { return policy.Choose(n); },
                                       max_tokens);
  }
  EngineOptions engine_options;
  engine_options.block_size = f.block_size;
  engine_options.kv_cache_bytes =
      device_kv_bytes ? *device_kv_bytes : static_cast<int64_t>(f.kv_cache_gb * (1 << 30));
  engine_options.max_num_batched_tokens = f.max_num_batched_tokens;
  engine_options.max_num_seqs = f.max_num_seqs;
  engine_options.max_waiting = f.max_waiting;
  engine_options.max_model_len = f.max_model_len;
  engine_options.enable_prefix_caching = !f.no_prefix_caching;
  engine_options.eos_token_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
  engine_options.num_speculative_tokens = proposers->empty() ? 0 : f.num_speculative_tokens;
  engine_options.speculative_token_threshold = f.speculative_token_threshold;
  engine_options.speculative_step_overhead_tokens = f.speculative_step_overhead_tokens;
  engine_options.measure_step_cost = f.speculative_cost_curve == "measure";
  engine_options.step_cost_curve_forward_only = f.speculative_cost_curve == "roofline";
  engine_options.speculative_step_cost_curve = cost_curve;
  engine_options.draft_selection = f.speculative_selection == "score" ? EngineOptions::DraftSelection::kScore
                                                                        : EngineOptions::DraftSelection::kAcceptance;
  auto engine = Engine::Create(std::move(backend).value(), engine_options, std::move(proposers).value());
  if (!engine.ok()) {
    LogEvent(LogLevel::kError, "worker", "engine_failed", {{"error", std::string(engine.status().message())}});
    return 1;
  }
  startup.Phase("kv_allocation");
  if (!(*engine)->options().speculative_step_cost_curve.empty()) {
    std::string curve;
    for (const auto& [tokens, ms] : (*engine)->options().speculative_step_cost_curve)
      absl::StrAppend(&curve, curve.empty() ? "" : " ", tokens, ":", std::lround(ms * 100) / 100.0);
    LogEvent(LogLevel::kInfo, "worker", "step_cost_curve",
             {{"source", f.speculative_cost_curve},
              {"hardware", f.speculative_cost_curve == "roofline" ? hardware.name : std::string("")},
              {"tokens_ms", curve}});
  }
  if (metrics_server) {
    metrics = std::make_unique<WorkerMetrics>(*metrics_server, f.model_name, (*engine)->max_model_len());
    metrics->SetParallelLayout(ranks, ranks > 1 ? parallel_stats : nullptr);
    metrics->AttachEngine(engine->get());
    if (speculation.suffix_cache_stats) metrics->AttachSuffixCacheStats(speculation.suffix_cache_stats);
    service.SetMetrics(metrics.get());
  }
  // A compressed-tensors checkpoint is named by its Linear weights' type.
  const std::string weight_dtype(DTypeName((*checkpoint)->weight_dtype()));
  WorkerServiceOptions description{f.model_name, weight_dtype,
                                   config.bos_token_id, engine_options.eos_token_ids, f.benchmark_forced_decoding};
  description.limits = {.vocab_size = config.vocab_size,
                        .max_context = (*engine)->max_model_len(),
                        .max_tokens_limit = f.max_tokens_limit};
  description.default_namespace = f.speculative_default_namespace;
  service.AttachEngine(engine->get(), std::move(description));
  if (metrics) metrics->SetStartup(startup.phases(), startup.SinceStartMs(), OutcomeName(cache_outcome));
  (*runner)->SetServing(true);
  EngineLoad load_report = (*engine)->Load();
  LogEvent(LogLevel::kInfo, "worker", "ready",
           {{"address", (*runner)->address()},
            {"model", f.model_name},
            {"weight_dtype", weight_dtype},
            {"kv_blocks", static_cast<int64_t>(load_report.total_blocks)},
            {"block_size", static_cast<int64_t>(load_report.block_size)},
            {"max_model_len", static_cast<int64_t>((*engine)->max_model_len())},
            {"weight_bytes", weight_bytes},
            {"kv_cache_bytes", kv_block_bytes * load_report.total_blocks},
            {"startup_ms", startup.SinceStartMs()}});

  int signal = termination.Wait();
  LogEvent(LogLevel::kInfo, "worker", "draining", {{"signal", static_cast<int64_t>(signal)}});
  service.StartDraining();
  (*runner)->DrainAndShutdown([&] { return service.in_flight(); }, std::chrono::seconds(f.drain_timeout_s));
  watch->stopping = true;
  (*engine)->Stop();
  engine->reset();  // rank 0's backend tells the other ranks to stop
  if (!f.rank_dir.empty()) std::filesystem::remove_all(f.rank_dir);
  LogEvent(LogLevel::kInfo, "worker", "stopped");
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Run(argc, argv); }
