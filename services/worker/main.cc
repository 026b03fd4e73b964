// floe-worker: serves one model's engine over the floe.v1.Worker API, on
// one rank or on a grid of T x S ranks (--tensor-parallel-size,
// --sequence-parallel-size; Shift Parallelism, model/parallel_layout.h):
// this process is rank 0 (engine, gRPC); the others are child processes of
// this binary (rank_launch.h) or, with --rank-launch remote, ranks started
// elsewhere that meet through the store rank 0 serves (--rank-store); each
// runs its shard of the model (rank_backend.h).
//
// The composition root: flags (worker_flags.h; the shared ones:
// common/service/service_bootstrap.h) -> plan (worker_plan.h) -> service,
// /metrics, gRPC (NOT_SERVING while loading) -> ranks, checkpoint, backend,
// engine -> serve until SIGTERM, then drain.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/cli/arg_parser.h"
#include "common/log/log.h"
#include "common/service/service_bootstrap.h"
#include "common/tensor/dtype.h"
#include "services/worker/engine/engine.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/parallel/rank_store.h"
#include "services/worker/rank_backend.h"
#include "services/worker/rank_launch.h"
#include "services/worker/speculation/make_proposers.h"
#include "services/worker/worker_flags.h"
#include "services/worker/worker_metrics.h"
#include "services/worker/worker_plan.h"
#include "services/worker/worker_service.h"

namespace floe {
namespace {

constexpr ServiceSpec kWorker{
    .program = "floe-worker",
    .component = "worker",
    .listening_line = "worker listening on ",
    .default_metrics_port = 0,
    .default_drain_timeout_s = 30,
    .drain_help = "seconds SIGTERM waits for running requests",
    .admin_key_help = "keys for the admin call Worker.Abort (lines \"SHA256_HEX TENANT admin\"); without it Abort "
                      "is open",
    .admin_calls_open_why = "no --admin-key-file: Worker.Abort needs no key"};

// Structured outputs need the model's tokenizer (its tokens' bytes): without
// a tokenizer.json in the model folder such requests are refused, and the
// worker serves everything else. The vocabulary is built on first use.
std::shared_ptr<StructuredOutputCompiler> MakeStructuredOutputCompiler(const WorkerFlags& f, const WorkerPlan& plan) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::path(f.model) / "tokenizer.json", error)) {
    LogEvent(LogLevel::kInfo, "worker", "structured_output_off",
             {{"why", f.model + "/tokenizer.json does not exist"}});
    return nullptr;
  }
  return std::make_shared<StructuredOutputCompiler>([model = f.model] { return LoadGrammarVocab(model); },
                                                    plan.structured_output);
}

int Run(int argc, char** argv) {
  ServiceBootstrap boot(kWorker);  // before any thread starts
  WorkerFlags f;
  ArgParser parser("floe-worker --model DIR [options]",
                   "Serves a Hugging Face checkpoint folder over the floe.v1.Worker gRPC API on the CPU backend.\n"
                   "Prints 'worker listening on HOST:PORT' once the port is bound; health turns SERVING once the\n"
                   "model is loaded. SIGTERM drains: NOT_SERVING, running requests finish, then exit.");
  AddWorkerFlags(parser, &f);
  boot.AddFlags(parser);
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe-worker")) return *exit_code;
  auto plan = PlanWorker(f);
  if (!plan.ok()) return boot.UsageError(std::string(plan.status().message()));
  if (auto exit_code = boot.Prepare()) return *exit_code;
  if (f.rank > 0) return RunFollowerRank(f, *plan, boot.channel_credentials(), boot.internal_trust());
  auto speculation = PlanSpeculation(f, *plan, boot.channel_credentials(), boot.internal_trust());
  if (!speculation.ok()) return boot.UsageError(std::string(speculation.status().message()));
  auto proposers = MakeProposers(*speculation);
  if (!proposers.ok()) return boot.UsageError(std::string(proposers.status().message()));

  WorkerService service(boot.internal_trust());
  if (auto exit_code = boot.Start()) return *exit_code;
  service.SetAdminKeys(boot.admin_keys());
  StartupClock& startup = boot.startup();
  startup.Phase("init");
  RankStoreService rank_store(boot.internal_trust());
  std::vector<grpc::Service*> services = {&service};
  if (plan->remote_ranks) services.push_back(&rank_store);
  auto serving = boot.Serve(services);
  if (!serving) return 1;
  LogEvent(LogLevel::kInfo, "worker", "device",
           {{"device", std::string(DeviceName(plan->device.device))}, {"why", plan->device.why}});
  LogEvent(LogLevel::kInfo, "worker", "loading", {{"model", f.model}, {"load_format", f.load_format}});

  // The other ranks: local ones start now, so they load while we do.
  const RankFailure rank_failed = FailWorkerOnRankFailure(boot.server());
  std::unique_ptr<LocalRanks> local_ranks;
  if (plan->remote_ranks) {
    LogEvent(LogLevel::kInfo, "worker", "waiting_for_ranks",
             {{"ranks", static_cast<int64_t>(plan->ranks - 1)}, {"rank_store", boot.server()->address()}});
  } else if (plan->ranks > 1) {
    auto started = LocalRanks::Start(argc, argv, f, plan->ranks, rank_failed);
    if (!started.ok()) return 1;  // logged
    local_ranks = *std::move(started);
  }
  auto checkpoint = Checkpoint::Load(f.model, plan->load);
  if (!checkpoint.ok()) {
    LogEvent(LogLevel::kError, "worker", "load_failed", {{"error", std::string(checkpoint.status().message())}});
    return 1;
  }
  startup.Phase("read");
  const ModelConfig& config = (*checkpoint)->config();
  auto backend = BuildRankZeroBackend(f, *plan, **checkpoint, plan->remote_ranks ? &rank_store : nullptr,
                                      boot.server(), rank_failed, startup);
  if (!backend.ok()) return 1;  // logged
  const bool drafts = !proposers->empty();
  const CostCurve curve = ResolveCostCurve(f, *plan, config, backend->hardware, backend->gpu_name, drafts);
  const cpu::KvDtype kv_dtype = backend->kv_dtype;
  const int64_t cpu_kv_bytes = backend->device_kv_bytes ? 0 : KvCacheBudgetBytes(f, *plan, config, kv_dtype);
  const EngineOptions engine_options =
      EngineOptionsFor(f, config, drafts, backend->device_kv_bytes, cpu_kv_bytes, curve);
  auto engine = Engine::Create(std::move(backend->backend), engine_options, std::move(proposers).value());
  if (!engine.ok()) {
    LogEvent(LogLevel::kError, "worker", "engine_failed", {{"error", std::string(engine.status().message())}});
    return 1;
  }
  startup.Phase("kv_allocation");
  LogStepCostCurve((*engine)->options(), curve, backend->hardware);
  const char* const kv_cache_dtype = cpu::KvDtypeName(kv_dtype);
  std::unique_ptr<WorkerMetrics> metrics;
  if (boot.metrics_server()) {
    metrics = std::make_unique<WorkerMetrics>(*boot.metrics_server(), f.model_name, (*engine)->max_model_len());
    metrics->SetParallelLayout(plan->ranks, plan->ranks > 1 ? backend->parallel_stats : nullptr);
    metrics->SetKvCacheDtype(kv_cache_dtype);
    metrics->AttachEngine(engine->get());
    if (speculation->suffix_cache_stats) metrics->AttachSuffixCacheStats(speculation->suffix_cache_stats);
    service.SetMetrics(metrics.get());
  }
  // A compressed-tensors checkpoint is named by its Linear weights' type.
  const std::string weight_dtype(DTypeName((*checkpoint)->weight_dtype()));
  WorkerServiceOptions description = DescribeWorker(f, config, engine_options, weight_dtype, (*engine)->max_model_len());
  description.structured_output = MakeStructuredOutputCompiler(f, *plan);
  service.AttachEngine(engine->get(), std::move(description));
  if (metrics)
    metrics->SetStartup(startup.phases(), startup.SinceStartMs(), WeightCacheOutcomeName(backend->cache_outcome));
  boot.SetServing(true);
  const EngineLoad load_report = (*engine)->Load();
  LogEvent(LogLevel::kInfo, "worker", "ready",
           {{"address", boot.server()->address()},
            {"model", f.model_name},
            {"weight_dtype", weight_dtype},
            {"kv_blocks", static_cast<int64_t>(load_report.total_blocks)},
            {"block_size", static_cast<int64_t>(load_report.block_size)},
            {"max_model_len", static_cast<int64_t>((*engine)->max_model_len())},
            {"weight_bytes", backend->weight_bytes},
            {"kv_cache_bytes", backend->kv_block_bytes * load_report.total_blocks},
            {"kv_cache_dtype", std::string(kv_cache_dtype)},
            {"kv_cache_tokens", static_cast<int64_t>(load_report.total_blocks) * load_report.block_size},
            {"startup_ms", startup.SinceStartMs()}});

  boot.WaitForTermination();
  service.StartDraining();
  boot.Drain([&] { return service.in_flight(); });
  if (local_ranks) local_ranks->Stop();  // their exits are expected now
  (*engine)->Stop();
  engine->reset();  // rank 0's backend tells the other ranks to stop
  return boot.Stopped();
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Run(argc, argv); }
