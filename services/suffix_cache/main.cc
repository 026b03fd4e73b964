// floe-suffix-cache: the global suffix tree of Suffix Decoding as a gRPC
// service (floe.v1.SuffixCache; docs/suffix-cache.md).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/auth/api_keys.h"
#include "common/cli/arg_parser.h"
#include "common/log/log.h"
#include "common/log/startup_clock.h"
#include "common/rpc/server_runner.h"
#include "common/rpc/termination_signal.h"
#include "common/rpc/tls.h"
#include "common/metrics/metrics_server.h"
#include "services/suffix_cache/lease_reaper.h"
#include "services/suffix_cache/suffix_cache_metrics.h"
#include "services/suffix_cache/suffix_cache_service.h"

namespace floe {
namespace {

using suffix_cache::ServiceLimits;
using suffix_cache::StoreOptions;

int Run(int argc, char** argv) {
  TerminationSignal termination;  // before any thread starts
  StartupClock startup("suffix-cache");
  // A Step holds up to --max-batch request locks at once; absl's debug-mode
  // deadlock graph would dominate it. The lock order is fixed by design
  // (suffix_cache_store.h).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::string host = "127.0.0.1";
  int port = 0;
  std::string snapshot_dir;
  int snapshot_interval_s = 300;
  int drain_timeout_s = 10;
  int metrics_port = -1;
  int max_threads = 64;
  StoreOptions store_options;
  ServiceLimits limits;
  ArgParser parser("floe-suffix-cache [options]",
                   "Serves Suffix Decoding's global suffix tree (cached responses per namespace) over the\n"
                   "floe.v1.SuffixCache gRPC API. Prints 'suffix-cache listening on HOST:PORT' once bound;\n"
                   "health turns SERVING after the snapshot is restored. SIGTERM: NOT_SERVING, running calls\n"
                   "finish, a final snapshot is written, exit.");
  parser.AddString("host", &host, "address to bind");
  parser.AddInt("port", &port, "port to bind (0: any free port)");
  parser.AddString("snapshot-dir", &snapshot_dir, "folder of suffix-cache.snap (empty: no snapshots)");
  parser.AddInt("snapshot-interval-s", &snapshot_interval_s, "seconds between periodic snapshots (0: only on SIGTERM and Snapshot)");
  parser.AddInt("snapshot-image-max-bytes-per-token", &store_options.max_image_bytes_per_token,
                "snapshots carry a namespace's tree image (restores at copy speed) when its tree is under 16 MiB "
                "or holds at most this many bytes per cached token; 0: tokens only (rebuilt on restore)");
  parser.AddInt("max-depth", &store_options.max_depth, "suffix tree depth (longest match + draft)");
  parser.AddInt64("max-prompt-index-tokens", &store_options.max_prompt_index_tokens,
                  "a request's local tree indexes only its prompt's last this many tokens (the tail is what a "
                  "response continues and copies from; the cap bounds one StartRequest's memory)");
  parser.AddInt64("max-cached-responses", &store_options.max_cached_responses,
                  "cached responses per namespace, FIFO beyond (-1: unlimited, 0: no global tree)");
  parser.AddInt64("max-bytes", &store_options.max_bytes,
                  "memory budget of the global trees and the active requests together: oldest ended responses "
                  "evicted beyond; a StartRequest whose request would take the active ones alone beyond it is "
                  "refused (RESOURCE_EXHAUSTED)");
  double request_lease_s = 60;
  parser.AddDouble("request-lease-s", &request_lease_s,
                   "an active request no call (Step, StartRequest) names for this many seconds is expired: ended as "
                   "by EndRequest, its memory released, later Steps naming it answer NOT_FOUND (0: never)");
  parser.AddInt("max-batch", &limits.max_batch, "most requests in one Step");
  parser.AddInt("vocab-size", &limits.vocab_size, "token ids must be below this (0: unchecked)");
  parser.AddInt("max-namespace-bytes", &limits.max_namespace_bytes, "longest namespace");
  parser.AddInt("max-spec-tokens", &limits.max_spec_tokens, "largest max_spec_tokens a Step may ask for");
  parser.AddInt("max-concurrent-calls", &limits.max_concurrent_calls, "calls served at once (beyond: RESOURCE_EXHAUSTED)");
  parser.AddInt("max-threads", &max_threads, "gRPC server threads");
  store_options.step_threads = std::min(15, std::max(0, static_cast<int>(std::thread::hardware_concurrency()) - 1));
  parser.AddBool("async-global-appends", &store_options.async_global_appends,
                 "apply a Step's global-tree appends after answering (drafts may lag a step; faster Steps)");
  parser.AddInt("step-threads", &store_options.step_threads,
                "threads sharing one Step's entries with the calling thread (default: cores - 1, at most 15)");
  std::string eviction = "fifo";
  parser.AddString("eviction", &eviction,
                   "fifo | usage (FIFO with a second chance for responses whose drafts were accepted)");
  parser.AddInt("metrics-port", &metrics_port, "Prometheus /metrics port (0: any free port; -1: off)");
  parser.AddInt("drain-timeout-s", &drain_timeout_s, "seconds SIGTERM waits for running calls");
  TlsOptions tls;
  AddTlsFlags(parser, &tls);
  std::string admin_key_file;
  parser.AddString("admin-key-file", &admin_key_file,
                   "keys for the admin calls Snapshot and ClearNamespace (lines \"SHA256_HEX TENANT admin\"); without it they are open");
  bool reflection = false;
  parser.AddBool("reflection", &reflection, "serve gRPC server reflection (off: it lists every method to any caller)");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe-suffix-cache")) return *exit_code;
  if (store_options.max_depth < 2 || store_options.max_depth > 1024 || limits.max_batch < 1 ||
      limits.max_concurrent_calls < 1 || store_options.max_bytes < 0 ||
      store_options.max_image_bytes_per_token < 0 || store_options.max_prompt_index_tokens < 0 ||
      !(request_lease_s >= 0 && request_lease_s <= 1e6)) {
    std::fprintf(stderr, "floe-suffix-cache: --max-depth must be in [2, 1024]; --max-batch, "
                         "--max-concurrent-calls >= 1; --max-bytes, --snapshot-image-max-bytes-per-token, "
                         "--max-prompt-index-tokens >= 0; --request-lease-s in [0, 1e6]\n");
    return 2;
  }
  store_options.request_lease = std::chrono::milliseconds(
      request_lease_s > 0 ? std::max<int64_t>(1, std::llround(request_lease_s * 1000)) : 0);
  if (auto kind = suffix_cache::ParseEvictionKind(eviction); kind.ok()) {
    store_options.eviction = *kind;
  } else {
    std::fprintf(stderr, "floe-suffix-cache: --eviction: %s\n", std::string(kind.status().message()).c_str());
    return 2;
  }
  if (!snapshot_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(snapshot_dir, ec);
    limits.snapshot_path = (std::filesystem::path(snapshot_dir) / "suffix-cache.snap").string();
  }

  suffix_cache::SuffixCacheStore store(store_options);
  suffix_cache::SuffixCacheService service(&store, limits);
  if (absl::Status s = ValidateTlsOptions(tls); !s.ok()) {
    std::fprintf(stderr, "floe-suffix-cache: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::optional<ApiKeys> admin_keys;
  if (!admin_key_file.empty()) {
    auto loaded = ApiKeys::Load(admin_key_file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "floe-suffix-cache: --admin-key-file: %s\n", std::string(loaded.status().message()).c_str());
      return 2;
    }
    admin_keys = *std::move(loaded);
    service.SetAdminKeys(&*admin_keys);
  } else {
    LogEvent(LogLevel::kWarning, "suffix-cache", "admin_calls_open",
             {{"why", "no --admin-key-file: Snapshot and ClearNamespace need no key"}});
  }
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<suffix_cache::SuffixCacheMetrics> metrics;
  if (metrics_port >= 0) {
    auto started = MetricsServer::Start({.host = host,
                                          .port = metrics_port,
                                          .tls_cert_file = tls.cert_file,
                                          .tls_key_file = tls.key_file,
                                          .tls_client_ca_file = tls.client_ca_file});
    if (!started.ok()) {
      LogEvent(LogLevel::kError, "suffix-cache", "metrics_failed", {{"error", std::string(started.status().message())}});
      return 1;
    }
    metrics_server = std::move(started).value();
    metrics = std::make_unique<suffix_cache::SuffixCacheMetrics>(*metrics_server, &store, &service);
  }
  startup.Phase("init");
  ServerOptions server_options;
  server_options.address = absl::StrCat(host, ":", port);
  server_options.max_threads = max_threads;
  server_options.tls = tls;
  server_options.reflection = reflection;
  auto runner = ServerRunner::Start(server_options, {&service});
  if (!runner.ok()) {
    LogEvent(LogLevel::kError, "suffix-cache", "listen_failed", {{"error", std::string(runner.status().message())}});
    return 1;
  }
  std::printf("suffix-cache listening on %s\n", (*runner)->address().c_str());
  if (metrics_server) std::printf("metrics suffix-cache %s\n", metrics_server->url().c_str());
  std::fflush(stdout);
  startup.Phase("grpc_start");

  // NOT_SERVING (and UNAVAILABLE) while restoring.
  const int64_t restored = service.RestoreSnapshot();
  store.TrimToBudget();
  startup.Phase("restore_snapshot");
  // Expires requests idle past their lease, from now until the drain ends.
  std::unique_ptr<suffix_cache::LeaseReaper> reaper;
  if (store_options.request_lease > std::chrono::milliseconds::zero()) {
    reaper = std::make_unique<suffix_cache::LeaseReaper>(
        &store, suffix_cache::LeaseReaper::PeriodFor(store_options.request_lease));
  }
  service.SetAccepting(true);
  (*runner)->SetServing(true);
  LogEvent(LogLevel::kInfo, "suffix-cache", "ready",
           {{"address", (*runner)->address()},
            {"restored_responses", restored},
            {"startup_ms", startup.SinceStartMs()}});

  auto last_snapshot = std::chrono::steady_clock::now();
  std::optional<int> signal;
  while (!(signal = termination.WaitFor(std::chrono::milliseconds(200)))) {
    store.TrimToBudget();
    if (!limits.snapshot_path.empty() && snapshot_interval_s > 0 &&
        std::chrono::steady_clock::now() - last_snapshot >= std::chrono::seconds(snapshot_interval_s)) {
      service.WriteSnapshot().IgnoreError();  // logged; the next period retries
      last_snapshot = std::chrono::steady_clock::now();
    }
  }
  LogEvent(LogLevel::kInfo, "suffix-cache", "draining", {{"signal", static_cast<int64_t>(*signal)}});
  service.SetAccepting(false);
  (*runner)->DrainAndShutdown([&] { return service.in_flight(); }, std::chrono::seconds(drain_timeout_s));
  if (reaper) reaper->Stop();
  if (!limits.snapshot_path.empty()) service.WriteSnapshot().IgnoreError();
  LogEvent(LogLevel::kInfo, "suffix-cache", "stopped");
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Run(argc, argv); }
