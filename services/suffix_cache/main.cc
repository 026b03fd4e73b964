// floe-suffix-cache: the global suffix tree of Suffix Decoding as a gRPC
// service (floe.v1.SuffixCache; docs/suffix-cache.md). Its composition
// root: flags (suffix_cache_flags.h, and the ones every service shares:
// common/service/service_bootstrap.h) -> store options and limits -> the
// store and service -> /metrics, gRPC -> restore the snapshot, serve,
// snapshot periodically and on SIGTERM.
#include <chrono>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/cli/arg_parser.h"
#include "common/log/log.h"
#include "common/service/service_bootstrap.h"
#include "services/suffix_cache/lease_reaper.h"
#include "services/suffix_cache/suffix_cache_flags.h"
#include "services/suffix_cache/suffix_cache_metrics.h"
#include "services/suffix_cache/suffix_cache_service.h"

namespace floe {
namespace {

constexpr ServiceSpec kSuffixCache{
    .program = "floe-suffix-cache",
    .component = "suffix-cache",
    .listening_line = "suffix-cache listening on ",
    .metrics_line_after_listening = true,
    .default_metrics_port = -1,
    .default_drain_timeout_s = 10,
    .drain_help = "seconds SIGTERM waits for running calls",
    .admin_key_help = "keys for the admin calls Snapshot and ClearNamespace (lines \"SHA256_HEX TENANT admin\"); "
                      "without it they are open",
    .admin_calls_open_why = "no --admin-key-file: Snapshot and ClearNamespace need no key"};

int Run(int argc, char** argv) {
  ServiceBootstrap boot(kSuffixCache);  // before any thread starts
  // A Step holds up to --max-batch request locks at once; absl's debug-mode
  // deadlock graph would dominate it. The lock order is fixed by design
  // (suffix_cache_store.h).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  SuffixCacheFlags f;
  ArgParser parser("floe-suffix-cache [options]",
                   "Serves Suffix Decoding's global suffix tree (cached responses per namespace) over the\n"
                   "floe.v1.SuffixCache gRPC API. Prints 'suffix-cache listening on HOST:PORT' once bound;\n"
                   "health turns SERVING after the snapshot is restored. SIGTERM: NOT_SERVING, running calls\n"
                   "finish, a final snapshot is written, exit.");
  AddSuffixCacheFlags(parser, &f);
  boot.AddFlags(parser);
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe-suffix-cache")) return *exit_code;
  auto plan = PlanSuffixCache(f);
  if (!plan.ok()) return boot.UsageError(std::string(plan.status().message()));
  if (auto exit_code = boot.Prepare()) return *exit_code;

  suffix_cache::SuffixCacheStore store(plan->store);
  suffix_cache::SuffixCacheService service(&store, plan->limits, boot.internal_trust());
  if (auto exit_code = boot.Start()) return *exit_code;
  service.SetAdminKeys(boot.admin_keys());
  std::unique_ptr<suffix_cache::SuffixCacheMetrics> metrics;
  if (boot.metrics_server())
    metrics = std::make_unique<suffix_cache::SuffixCacheMetrics>(*boot.metrics_server(), &store, &service);
  boot.startup().Phase("init");
  auto serving = boot.Serve({&service}, {.max_threads = f.max_threads});
  if (!serving) return 1;

  // NOT_SERVING (and UNAVAILABLE) while restoring.
  const int64_t restored = service.RestoreSnapshot();
  store.TrimToBudget();
  boot.startup().Phase("restore_snapshot");
  // Expires requests idle past their lease, from now until the drain ends.
  std::unique_ptr<suffix_cache::LeaseReaper> reaper;
  if (plan->store.request_lease > std::chrono::milliseconds::zero()) {
    reaper = std::make_unique<suffix_cache::LeaseReaper>(
        &store, suffix_cache::LeaseReaper::PeriodFor(plan->store.request_lease));
  }
  service.SetAccepting(true);
  boot.SetServing(true);
  LogEvent(LogLevel::kInfo, "suffix-cache", "ready",
           {{"address", boot.server()->address()},
            {"restored_responses", restored},
            {"startup_ms", boot.startup().SinceStartMs()}});

  const std::string& snapshot_path = plan->limits.snapshot_path;
  auto last_snapshot = std::chrono::steady_clock::now();
  boot.WaitForTermination([&] {
    store.TrimToBudget();
    if (!snapshot_path.empty() && f.snapshot_interval_s > 0 &&
        std::chrono::steady_clock::now() - last_snapshot >= std::chrono::seconds(f.snapshot_interval_s)) {
      service.WriteSnapshot().IgnoreError();  // logged; the next period retries
      last_snapshot = std::chrono::steady_clock::now();
    }
  });
  service.SetAccepting(false);
  boot.Drain([&] { return service.in_flight(); });
  if (reaper) reaper->Stop();
  if (!snapshot_path.empty()) service.WriteSnapshot().IgnoreError();
  return boot.Stopped();
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Run(argc, argv); }
