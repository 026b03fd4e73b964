// floe-router: the public floe.v1.Floe API in front of one or more workers.
// Its composition root: flags (router_flags.h, and the ones every service
// shares: common/service/service_bootstrap.h) -> the worker list -> the
// tokenizer, worker pool, picker, admission gate and service -> /metrics,
// the OpenAI HTTP listener, gRPC -> serve once a worker describes the model.
#include <cstdio>
#include <optional>

#include "common/cli/arg_parser.h"
#include "common/log/log.h"
#include "common/service/service_bootstrap.h"
#include "services/router/openai_listener.h"
#include "services/router/router_flags.h"
#include "services/router/router_metrics.h"
#include "services/router/router_service.h"

namespace floe {
namespace {

constexpr ServiceSpec kRouter{.program = "floe-router",
                              .component = "router",
                              .listening_line = "router bound to ",
                              .default_metrics_port = 0,
                              .default_drain_timeout_s = 30,
                              .drain_help = "seconds SIGTERM waits for running requests"};

int Run(int argc, char** argv) {
  ServiceBootstrap boot(kRouter);
  RouterFlags f;
  ArgParser parser("floe-router --workers HOST:PORT[,...] --tokenizer DIR [options]",
                   "Serves the public floe.v1.Floe gRPC API and routes requests to workers.\n"
                   "Health turns SERVING once a worker has described its model. SIGTERM drains.");
  AddRouterFlags(parser, &f);
  boot.AddFlags(parser);
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe-router")) return *exit_code;
  auto addresses = PlanWorkers(f);
  if (!addresses.ok()) return boot.UsageError(std::string(addresses.status().message()));
  if (auto exit_code = boot.Prepare()) return *exit_code;
  const ServiceFlags& common = boot.flags();
  StartupClock& startup = boot.startup();
  startup.Phase("init");
  auto tokenizer = Tokenizer::Load(f.tokenizer);
  if (!tokenizer.ok()) {
    LogEvent(LogLevel::kError, "router", "tokenizer_failed", {{"error", std::string(tokenizer.status().message())}});
    return 1;
  }
  startup.Phase("tokenizer");

  WorkerPool pool(*addresses, {.poll_interval = std::chrono::milliseconds(f.health_interval_ms),
                               .credentials = boot.channel_credentials(),
                               .internal_trust = boot.internal_trust()});
  pool.Start();
  std::unique_ptr<WorkerPicker> picker = f.policy == "least-outstanding"
                                             ? MakeLeastOutstandingPicker(&pool)
                                             : MakeSessionAffinityPicker(&pool, f.overload_outstanding);
  AdmissionGate gate(f.max_in_flight, f.max_queued, std::chrono::milliseconds(f.queue_timeout_ms));
  std::optional<ApiKeys> api_keys;
  if (!f.api_key_file.empty()) {
    auto loaded = ApiKeys::Load(f.api_key_file);
    if (!loaded.ok()) return boot.UsageError(std::string(loaded.status().message()));
    api_keys = *std::move(loaded);
    LogEvent(LogLevel::kInfo, "router", "api_keys_loaded", {{"keys", static_cast<int64_t>(api_keys->size())}});
  }
  RateLimiter rate_limiter(f.rate_limit_rps, f.rate_limit_tps);
  RouterService service({.model_name = f.model_name,
                         .max_retries = f.max_retries,
                         .api_keys = api_keys ? &*api_keys : nullptr,
                         .rate_limiter = rate_limiter.enabled() ? &rate_limiter : nullptr},
                        tokenizer->get(), &pool, picker.get(), &gate);
  if (auto exit_code = boot.Start()) return *exit_code;
  std::unique_ptr<RouterMetrics> metrics;
  if (boot.metrics_server()) {
    metrics = std::make_unique<RouterMetrics>(*boot.metrics_server(), &pool, &gate);
    service.SetMetrics(metrics.get());
  }
  // The OpenAI front: the HTTP port when asked for, and the chat rendering
  // gRPC chats use in any case.
  auto http = OpenAiListener::Start({.host = common.host,
                                     .port = f.http_port,
                                     .threads = f.http_threads,
                                     .max_body_bytes = static_cast<size_t>(f.max_message_bytes),
                                     .tls = common.tls,
                                     .chat_template_file = f.chat_template,
                                     .tokenizer_path = f.tokenizer,
                                     .strict_fields = f.strict_fields,
                                     .tool_call_parser = f.tool_call_parser},
                                    **tokenizer, &service);
  if (!http.ok()) return 1;  // logged
  if (f.http_port >= 0) std::printf("http bound to %s\n", (*http)->address().c_str());
  auto serving = boot.Serve({&service}, {.max_message_bytes = f.max_message_bytes});
  if (!serving) return 1;

  // Serve once some worker is healthy (its load poll answered) and has
  // described the model; keep asking until then. Serving before a worker is
  // healthy would answer the first requests "no worker left to try".
  floe::v1::ModelInfo info;
  for (;;) {
    if (pool.healthy_count() > 0 && pool.FetchModelInfo(&info, std::chrono::milliseconds(500))) break;
    if (boot.termination().WaitFor(std::chrono::milliseconds(50))) {
      LogEvent(LogLevel::kInfo, "router", "stopped_before_ready");
      return 0;
    }
  }
  startup.Phase("workers_ready");
  service.SetModelInfo(info);
  boot.SetServing(true);
  LogEvent(LogLevel::kInfo, "router", "ready",
           {{"address", boot.server()->address()},
            {"workers", static_cast<int64_t>(addresses->size())},
            {"model", f.model_name.empty() ? info.name() : f.model_name},
            {"policy", f.policy},
            {"startup_ms", startup.SinceStartMs()}});

  boot.WaitForTermination();
  service.StartDraining();
  boot.Drain([&] { return service.in_flight(); });
  (*http)->Shutdown();
  return boot.Stopped();
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Run(argc, argv); }
