#include "services/worker/worker_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log/log.h"
#include "common/tensor/dtype.h"
#include "services/worker/engine/draft_budget.h"
#include "services/worker/model/model_config.h"
#ifdef FLOE_HAVE_CUDA
#include "kernels/cuda/model_kernels.h"
#endif

namespace floe {
namespace {

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

#ifdef FLOE_HAVE_NCCL
constexpr bool kBuiltWithNccl = true;
#else
constexpr bool kBuiltWithNccl = false;
#endif

DeviceSupport ThisBuildAndMachine(const WorkerFlags& f) {
#ifdef FLOE_HAVE_CUDA
  return {true, kBuiltWithNccl, f.device == "cpu" ? 0 : cuda::DeviceCount()};
#else
  (void)f;
  return {false, kBuiltWithNccl, 0};
#endif
}

// --tensor-parallel-size, --sequence-parallel-size, --parallel-mode,
// --shift-threshold, --shift-profile.
absl::Status PlanParallel(WorkerFlags& f, WorkerPlan& plan) {
  if (f.tensor_parallel_size < 1 || f.tensor_parallel_size > 64)
    return Invalid(absl::StrCat("--tensor-parallel-size must be in [1, 64], got ", f.tensor_parallel_size));
  if (f.sequence_parallel_size < 1 || f.sequence_parallel_size > 64)
    return Invalid(absl::StrCat("--sequence-parallel-size must be in [1, 64], got ", f.sequence_parallel_size));
  plan.ranks = f.tensor_parallel_size * f.sequence_parallel_size;
  if (plan.ranks > 64) {
    return Invalid(absl::StrCat("--tensor-parallel-size ", f.tensor_parallel_size, " x --sequence-parallel-size ",
                                f.sequence_parallel_size, " = ", plan.ranks, " ranks, at most 64"));
  }
  if (f.parallel_mode.empty()) f.parallel_mode = f.sequence_parallel_size > 1 ? "shift" : "tp";
  auto pin = ParseParallelMode(f.parallel_mode);
  if (!pin.ok()) return Invalid(absl::StrCat("--parallel-mode: ", pin.status().message()));
  plan.policy.pin = *pin;
  if (f.shift_threshold < 0) return Invalid(absl::StrCat("--shift-threshold must be >= 0, got ", f.shift_threshold));
  if (!f.shift_profile.empty()) {
    if (plan.policy.pin != ShiftPolicy::Pin::kShift || f.sequence_parallel_size == 1 || f.shift_threshold > 0) {
      return Invalid("--shift-profile needs --parallel-mode shift, --sequence-parallel-size > 1 "
                     "and no --shift-threshold");
    }
    // Only rank 0 chooses modes; the other ranks (maybe on machines
    // without the file) get the flags as they are and ignore it.
    if (f.rank == 0) {
      auto profile = LoadShiftProfile(f.shift_profile);
      if (!profile.ok()) return Invalid(absl::StrCat("--shift-profile: ", profile.status().message()));
      plan.policy.profile = *std::move(profile);
    }
  }
  // With S = 1 both modes are TP.
  if (f.sequence_parallel_size == 1) plan.policy.pin = ShiftPolicy::Pin::kTensor;
  return absl::OkStatus();
}

bool NamedCostCurve(const std::string& name) {
  return name == "auto" || name == "measure" || name == "roofline" || name == "linear";
}

}  // namespace

absl::StatusOr<WorkerPlan> PlanWorker(WorkerFlags& f) {
  if (f.model.empty()) return Invalid("--model is required (see --help)");
  if (f.model_name.empty()) f.model_name = std::filesystem::path(f.model).filename().string();
  WorkerPlan plan;
  if (f.load_format == "dummy") {
    plan.load.format = LoadFormat::kDummy;
  } else if (f.load_format == "safetensors") {
    plan.load.format = LoadFormat::kSafetensors;
  } else if (f.load_format != "auto") {
    return Invalid("--load-format must be auto, safetensors or dummy");
  }
  auto dummy_dtype = ParseDTypeName(f.dummy_dtype);
  if (!dummy_dtype.ok()) return Invalid(absl::StrCat("--dummy-dtype: ", dummy_dtype.status().message()));
  plan.load.dummy_dtype = *dummy_dtype;
  if (absl::Status s = PlanParallel(f, plan); !s.ok()) return s;
  if (!NamedCostCurve(f.speculative_cost_curve)) {
    auto curve = StepCostCurve::Load(f.speculative_cost_curve);
    if (!curve.ok()) return Invalid(absl::StrCat("--speculative-cost-curve: ", curve.status().message()));
    plan.cost_curve = curve->points();
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  plan.threads = plan.ranks == 1            ? f.threads
                 : f.threads_per_rank > 0 ? f.threads_per_rank
                                          : std::max(1, cores / plan.ranks);
  if (absl::Status s = CheckWeightCacheMaxGb(f.weight_cache_max_gb); !s.ok()) return s;
  // Ranks started elsewhere (--rank-launch remote, --rank-store) bring their own GPU.
  const int ranks_here = f.rank_launch == "remote" || !f.rank_store.empty() ? 1 : plan.ranks;
  plan.support = ThisBuildAndMachine(f);
  auto device = ChooseDevice(f.device, plan.support, plan.ranks, ranks_here);
  if (!device.ok()) return Invalid(std::string(device.status().message()));
  plan.device = *std::move(device);
  if (f.speculative_cost_curve == "roofline" && plan.device.device != Device::kCuda) {
    return Invalid("--speculative-cost-curve roofline needs a GPU backend (--device cuda); "
                   "the CPU measures its curve (measure)");
  }
  if (f.kv_cache_dtype != "auto" && f.kv_cache_dtype != "f32" && f.kv_cache_dtype != "bf16" &&
      f.kv_cache_dtype != "fp8_e4m3" && f.kv_cache_dtype != "fp8")
    return Invalid(absl::StrCat("--kv-cache-dtype must be auto, f32, bf16 or fp8_e4m3 (fp8), got ",
                                f.kv_cache_dtype.substr(0, 32)));
  if (!(f.kv_cache_auto_fraction > 0 && f.kv_cache_auto_fraction <= 0.9))
    return Invalid(absl::StrCat("--kv-cache-auto-fraction must be in (0, 0.9], got ", f.kv_cache_auto_fraction));
  if (!(f.kv_cache_gb >= 0) || f.kv_cache_gb > 65536)
    return Invalid(absl::StrCat("--kv-cache-gb must be in [0, 65536] (0: auto), got ", f.kv_cache_gb));
  if (!(f.gpu_memory_utilization > 0 && f.gpu_memory_utilization <= 1))
    return Invalid(absl::StrCat("--gpu-memory-utilization must be in (0, 1], got ", f.gpu_memory_utilization));
  if (f.rank > 0 && (f.rank >= plan.ranks || f.rank_dir.empty() == f.rank_store.empty())) {
    return Invalid(absl::StrCat("--rank ", f.rank, " needs one of --rank-dir and --rank-store, and more than ", f.rank,
                                " ranks"));
  }
  if (f.speculative.empty()) f.speculative = f.suffix_cache.empty() ? "off" : "suffix";
  if (f.speculative_selection != "acceptance" && f.speculative_selection != "score") {
    return Invalid(absl::StrCat("--speculative-selection must be acceptance or score, got \"",
                                f.speculative_selection, "\""));
  }
  if (f.rank_launch != "local" && f.rank_launch != "remote")
    return Invalid(absl::StrCat("--rank-launch must be local or remote, got ", f.rank_launch));
  plan.remote_ranks = plan.ranks > 1 && f.rank_launch == "remote";
  if (f.structured_output_cache_size < 0 || f.structured_output_cache_size > 100000) {
    return Invalid(absl::StrCat("--structured-output-cache-size must be in [0, 100000], got ",
                                f.structured_output_cache_size));
  }
  if (f.structured_output_compile_timeout_ms < 1 || f.structured_output_compile_timeout_ms > 600000) {
    return Invalid(absl::StrCat("--structured-output-compile-timeout-ms must be in [1, 600000], got ",
                                f.structured_output_compile_timeout_ms));
  }
  plan.structured_output.cache_size = static_cast<size_t>(f.structured_output_cache_size);
  plan.structured_output.compile_timeout = std::chrono::milliseconds(f.structured_output_compile_timeout_ms);
  return plan;
}

absl::StatusOr<SpeculationConfig> PlanSpeculation(const WorkerFlags& f, const WorkerPlan& plan,
                                                  std::shared_ptr<grpc::ChannelCredentials> credentials,
                                                  std::shared_ptr<const InternalTrust> internal_trust) {
  SpeculationConfig speculation{f.speculative, f.num_speculative_tokens, {}, 5};
  speculation.speculator_dir = f.speculator;
  // 0 threads: all cores, as the backend reads it.
  speculation.speculator_threads =
      plan.threads > 0 ? plan.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (!f.speculator.empty()) {
    // The speculator must fit the served model: its config.json is enough.
    auto target = ModelConfig::FromFile(f.model + "/config.json");
    if (!target.ok()) return Invalid(absl::StrCat("--model: ", target.status().message()));
    speculation.target_hidden_size = target->hidden_size;
    speculation.target_vocab_size = target->vocab_size;
    speculation.target_name = f.model;
  }
  speculation.credentials = std::move(credentials);
  speculation.internal_trust = std::move(internal_trust);
  speculation.tree = f.speculative_tree;
  speculation.reference_compatible = f.speculative_reference_compatible;
  if (!f.suffix_cache.empty()) {
    speculation.suffix_cache_addresses = absl::StrSplit(f.suffix_cache, ',');
    if (f.speculative == "suffix" || f.speculative == "suffix+lstm")
      speculation.suffix_cache_stats = std::make_shared<RemoteSuffixStats>(speculation.suffix_cache_addresses);
  }
  return speculation;
}

CostCurve ResolveCostCurve(const WorkerFlags& f, const WorkerPlan& plan, const ModelConfig& config,
                           const Hardware& hardware, const std::string& gpu_name, bool drafts) {
  CostCurve curve{f.speculative_cost_curve, plan.cost_curve};
  // auto: the roofline on a GPU whose figures the cost model has (H100,
  // H200); measured elsewhere.
  const bool known_gpu = gpu_name.find("H100") != std::string::npos || gpu_name.find("H200") != std::string::npos;
  if (curve.source == "auto") curve.source = plan.device.device == Device::kCuda && known_gpu ? "roofline" : "measure";
  if (curve.source == "roofline" && drafts) {
    // Up to what a step may verify: the roofline's knee on a GPU lies far
    // past the 64 tokens a measurement runs.
    const int max_tokens = std::max(1, std::min(f.max_num_batched_tokens, f.speculative_token_threshold));
    const ShiftPolicy& policy = plan.policy;
    curve.points = RooflineStepCostCurve(config, hardware, Grid{f.tensor_parallel_size, f.sequence_parallel_size},
                                         [&](int64_t n) { return policy.Choose(n); }, max_tokens);
  }
  return curve;
}

cpu::KvDtype ResolveKvCacheDtype(const WorkerFlags& f, Device device, const ModelConfig& config,
                                 const ModelWeights& weights) {
  if (f.kv_cache_dtype == "f32") return cpu::KvDtype::kF32;
  if (f.kv_cache_dtype == "bf16") return cpu::KvDtype::kBf16;
  if (f.kv_cache_dtype == "fp8_e4m3" || f.kv_cache_dtype == "fp8") return cpu::KvDtype::kFp8E4m3;
  if (device == Device::kCuda) return cpu::KvDtype::kF32;
  const std::string& torch_dtype = config.torch_dtype;
  const bool half = torch_dtype.empty()
                        ? weights.embed_tokens.dtype == DType::kBF16 || weights.embed_tokens.dtype == DType::kF16
                        : torch_dtype == "bfloat16" || torch_dtype == "float16";
  return half ? cpu::KvDtype::kBf16 : cpu::KvDtype::kF32;
}

namespace {

// /proc/meminfo's MemAvailable, or 0 where it cannot be read.
int64_t MemAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

int64_t KvCacheBudgetBytes(const WorkerFlags& f, const WorkerPlan& plan, const ModelConfig& config,
                           cpu::KvDtype dtype) {
  if (f.kv_cache_gb > 0) return static_cast<int64_t>(f.kv_cache_gb * (1 << 30));
  // A rank caches its share of the kv heads (all of a head where heads are
  // fewer than ranks).
  const int64_t heads_per_rank = (config.num_kv_heads + plan.ranks - 1) / plan.ranks;
  const int64_t bytes_per_token = static_cast<int64_t>(config.num_layers) * 2 * heads_per_rank * config.head_dim *
                                  static_cast<int64_t>(cpu::KvElementBytes(dtype));
  const int64_t want = kAutoKvCacheTokens * bytes_per_token;
  const int ranks_here = f.rank_launch == "remote" || !f.rank_store.empty() ? 1 : plan.ranks;
  const int64_t available = MemAvailableBytes();
  const int64_t cap =
      available > 0 ? static_cast<int64_t>(static_cast<double>(available) * f.kv_cache_auto_fraction / ranks_here)
                    : want;
  // A floor of 16 MiB: a model so small that 32k tokens fit in less costs
  // nothing more to give room for more.
  constexpr int64_t kFloor = 16 << 20;
  const int64_t bytes = std::max(std::min(want, cap), kFloor);
  const std::string reason =
      bytes == kFloor && want < kFloor
          ? absl::StrCat("16 MiB, the floor: more than ", kAutoKvCacheTokens, " tokens")
      : bytes == want ? absl::StrCat("room for ", kAutoKvCacheTokens, " tokens")
                      : absl::StrCat(f.kv_cache_auto_fraction, " of the ", available >> 20, " MiB available, over ",
                                     ranks_here, " rank(s)");
  LogEvent(LogLevel::kInfo, "worker", "kv_cache_budget",
           {{"bytes", bytes},
            {"tokens", bytes / std::max<int64_t>(bytes_per_token, 1)},
            {"kv_cache_dtype", std::string(cpu::KvDtypeName(dtype))},
            {"reason", reason + " (--kv-cache-gb 0: auto)"}});
  return bytes;
}

EngineOptions EngineOptionsFor(const WorkerFlags& f, const ModelConfig& config, bool drafts,
                               std::optional<int64_t> device_kv_bytes, int64_t cpu_kv_bytes, const CostCurve& curve) {
  EngineOptions o;
  o.block_size = f.block_size;
  o.kv_cache_bytes = device_kv_bytes ? *device_kv_bytes : cpu_kv_bytes;
  o.max_num_batched_tokens = f.max_num_batched_tokens;
  o.max_num_seqs = f.max_num_seqs;
  o.max_waiting = f.max_waiting;
  o.max_model_len = f.max_model_len;
  o.enable_prefix_caching = !f.no_prefix_caching;
  o.eos_token_ids.assign(config.eos_token_ids.begin(), config.eos_token_ids.end());
  o.num_speculative_tokens = drafts ? f.num_speculative_tokens : 0;
  o.grammar_drafts = f.structured_output_drafts;
  o.speculative_token_threshold = f.speculative_token_threshold;
  o.speculative_step_overhead_tokens = f.speculative_step_overhead_tokens;
  o.measure_step_cost = curve.source == "measure";
  o.step_cost_curve_forward_only = curve.source == "roofline";
  o.speculative_step_cost_curve = curve.points;
  o.draft_selection = f.speculative_selection == "score" ? EngineOptions::DraftSelection::kScore
                                                         : EngineOptions::DraftSelection::kAcceptance;
  return o;
}

WorkerServiceOptions DescribeWorker(const WorkerFlags& f, const ModelConfig& config, const EngineOptions& options,
                                    const std::string& weight_dtype, int max_model_len) {
  WorkerServiceOptions description{f.model_name, weight_dtype, config.bos_token_id, options.eos_token_ids,
                                   f.benchmark_forced_decoding};
  description.limits = {
      .vocab_size = config.vocab_size, .max_context = max_model_len, .max_tokens_limit = f.max_tokens_limit};
  description.default_namespace = f.speculative_default_namespace;
  return description;
}

void LogStepCostCurve(const EngineOptions& options, const CostCurve& curve, const Hardware& hardware) {
  if (options.speculative_step_cost_curve.empty()) return;
  std::string points;
  for (const auto& [tokens, ms] : options.speculative_step_cost_curve)
    absl::StrAppend(&points, points.empty() ? "" : " ", tokens, ":", std::lround(ms * 100) / 100.0);
  LogEvent(LogLevel::kInfo, "worker", "step_cost_curve",
           {{"source", curve.source},
            {"hardware", curve.source == "roofline" ? hardware.name : std::string("")},
            {"tokens_ms", points}});
}

}  // namespace floe
