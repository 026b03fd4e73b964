// What floe-worker derives from its flags (worker_flags.h) before anything
// starts: the checkpoint's load options, the rank grid and this rank's
// threads, the Shift Parallelism policy, the device, the speculation
// config; and, once rank 0's backend exists, the engine's options. Every
// check is here, so a bad flag fails before a port is bound or a rank
// forked.
//
// Errors are INVALID_ARGUMENT, the message main prints after
// "floe-worker: " (exit 2), naming the flag and its range.
// Thread: main's, at start.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "common/auth/internal_trust.h"
#include "kernels/cpu/attention.h"
#include "services/worker/backend/device_choice.h"
#include "services/worker/backend/shift_policy.h"
#include "services/worker/engine/engine.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/parallel/cost_model.h"
#include "services/worker/speculation/make_proposers.h"
#include "services/worker/structured/structured_output_compiler.h"
#include "services/worker/worker_flags.h"
#include "services/worker/worker_service.h"

namespace floe {

struct WorkerPlan {
  LoadOptions load;
  int ranks = 1;                // T x S
  int threads = 0;              // this rank's compute threads (0: all cores)
  bool remote_ranks = false;    // rank 0 waits for ranks started elsewhere
  ShiftPolicy policy;           // the threshold is the cost model's, once the model is read
  std::vector<std::pair<int, double>> cost_curve;  // a --speculative-cost-curve file's points
  DeviceSupport support;
  DeviceChoice device;
  StructuredOutputOptions structured_output;  // --structured-output-*
};

// Checks every flag a rank needs and fills in the defaults `flags` leaves
// open (--model-name, --parallel-mode, --speculative).
absl::StatusOr<WorkerPlan> PlanWorker(WorkerFlags& flags);

// Rank 0's speculation: proposers, the suffix cache and its channels.
absl::StatusOr<SpeculationConfig> PlanSpeculation(const WorkerFlags& flags, const WorkerPlan& plan,
                                                  std::shared_ptr<grpc::ChannelCredentials> credentials,
                                                  std::shared_ptr<const InternalTrust> internal_trust);

// The step cost curve's source and points once the backend is known: "auto"
// becomes roofline on an H100 or H200, measure elsewhere; roofline computes
// its points from `hardware` (when some proposer drafts).
struct CostCurve {
  std::string source;  // measure | roofline | linear | a file
  std::vector<std::pair<int, double>> points;
};
CostCurve ResolveCostCurve(const WorkerFlags& flags, const WorkerPlan& plan, const ModelConfig& config,
                           const Hardware& hardware, const std::string& gpu_name, bool drafts);

// --kv-cache-dtype against the checkpoint: auto keeps the model's dtype on
// the CPU, as vLLM's does (bf16 for a bf16 or f16 checkpoint: config.json's
// torch_dtype, else its embeddings' dtype; f32 otherwise); on CUDA auto is
// f32 until the narrow CUDA cache has run on a GPU (docs/gpu.md), where
// bf16 and fp8_e4m3 are there to be asked for.
cpu::KvDtype ResolveKvCacheDtype(const WorkerFlags& flags, Device device, const ModelConfig& config,
                                 const ModelWeights& weights);

// The CPU KV cache's budget per rank: --kv-cache-gb, or with --kv-cache-gb 0
// (auto, floe local's default) room for kAutoKvCacheTokens tokens of this
// model in `dtype`, at most --kv-cache-auto-fraction of the memory available
// over this host's ranks; logs "kv_cache_budget" with what it chose and why.
inline constexpr int64_t kAutoKvCacheTokens = 32768;
int64_t KvCacheBudgetBytes(const WorkerFlags& flags, const WorkerPlan& plan, const ModelConfig& config,
                           cpu::KvDtype dtype);

// The engine's options from the flags, the model and the backend.
// `device_kv_bytes`: the KV budget --gpu-memory-utilization left on a GPU
// (else `cpu_kv_bytes`, KvCacheBudgetBytes's).
EngineOptions EngineOptionsFor(const WorkerFlags& flags, const ModelConfig& config, bool drafts,
                               std::optional<int64_t> device_kv_bytes, int64_t cpu_kv_bytes, const CostCurve& curve);

// What GetModelInfo reports and requests are resolved against.
WorkerServiceOptions DescribeWorker(const WorkerFlags& flags, const ModelConfig& config, const EngineOptions& options,
                                    const std::string& weight_dtype, int max_model_len);

// Logs "step_cost_curve" (source, hardware, the points) when the engine has one.
void LogStepCostCurve(const EngineOptions& options, const CostCurve& curve, const Hardware& hardware);

}  // namespace floe
