// floe-router: the public floe.v1.Floe API in front of one or more workers.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli/arg_parser.h"
#include "common/http/http_server.h"
#include "common/jinja/chat_template.h"
#include "common/log/log.h"
#include "common/log/startup_clock.h"
#include "common/metrics/metrics_server.h"
#include "common/rpc/server_runner.h"
#include "common/rpc/termination_signal.h"
#include "common/rpc/tls.h"
#include "services/router/openai/openai_frontend.h"
#include "services/router/router_service.h"

namespace floe {
namespace {

struct RouterFlags {
  std::string workers;
  std::string config;
  std::string tokenizer;
  std::string model_name;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string policy = "session-affinity";
  int max_in_flight = 256;
  int max_queued = 256;
  int queue_timeout_ms = 2000;
  int overload_outstanding = 32;
  int max_retries = 2;
  int health_interval_ms = 250;
  int max_message_bytes = 4 << 20;
  int drain_timeout_s = 30;
  int metrics_port = 0;
  int http_port = -1;
  int http_threads = 2;
  std::string chat_template;
  std::string api_key_file;
  double rate_limit_rps = 0, rate_limit_tps = 0;
  TlsOptions tls;
  bool reflection = false;
};

// The chat template: --chat-template FILE (a Jinja file), else the
// tokenizer_config.json beside the tokenizer. None is not an error (chat is
// refused per request); one that cannot be parsed is, at start.
absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadChatTemplate(const RouterFlags& f, const Tokenizer& tokenizer) {
  namespace fs = std::filesystem;
  const std::string bos = tokenizer.bos_id() ? tokenizer.Decode(std::vector<int32_t>{*tokenizer.bos_id()}, false).value_or("") : "";
  const std::string eos = tokenizer.eos_ids().empty() ? "" : tokenizer.Decode(std::vector<int32_t>{tokenizer.eos_ids()[0]}, false).value_or("");
  if (!f.chat_template.empty()) {
    std::ifstream in(f.chat_template);
    if (!in) return absl::NotFoundError(absl::StrCat("--chat-template: cannot read ", f.chat_template));
    std::stringstream source;
    source << in.rdbuf();
    auto loaded = ChatTemplate::FromSource(source.str(), bos, eos);
    if (!loaded.ok()) return loaded.status();
    return std::make_unique<ChatTemplate>(*std::move(loaded));
  }
  fs::path dir = f.tokenizer;
  if (!fs::is_directory(dir)) dir = dir.parent_path();
  const fs::path config = dir / "tokenizer_config.json";
  if (!fs::exists(config)) return std::unique_ptr<ChatTemplate>();
  auto loaded = ChatTemplate::FromTokenizerConfig(config.string());
  if (absl::IsNotFound(loaded.status())) return std::unique_ptr<ChatTemplate>();
  if (!loaded.ok()) return loaded.status();
  return std::make_unique<ChatTemplate>(*std::move(loaded));
}

absl::StatusOr<std::vector<std::string>> WorkerAddresses(const RouterFlags& f) {
  std::vector<std::string> addresses;
  if (!f.workers.empty()) {
    for (absl::string_view a : absl::StrSplit(f.workers, ',', absl::SkipEmpty())) addresses.emplace_back(a);
  }
  if (!f.config.empty()) {
    std::ifstream in(f.config);
    if (!in) return absl::NotFoundError(absl::StrCat("--config: cannot read ", f.config));
    nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.contains("workers") || !config["workers"].is_array())
      return absl::InvalidArgumentError(absl::StrCat("--config ", f.config, ": expected {\"workers\": [\"host:port\", ...]}"));
    for (const auto& item : config.items()) {
      if (item.key() != "workers")
        return absl::InvalidArgumentError(absl::StrCat("--config ", f.config, ": unknown key \"", item.key(),
                                                       "\" (the file holds only \"workers\")"));
    }
    for (const auto& w : config["workers"]) {
      if (!w.is_string()) return absl::InvalidArgumentError("--config: workers entries must be \"host:port\" strings");
      addresses.push_back(w.get<std::string>());
    }
  }
  if (addresses.empty()) return absl::InvalidArgumentError("no workers: give --workers HOST:PORT[,...] or --config FILE");
  return addresses;
}

int Run(int argc, char** argv) {
  TerminationSignal termination;
  RouterFlags f;
  ArgParser parser("floe-router --workers HOST:PORT[,...] --tokenizer DIR [options]",
                   "Serves the public floe.v1.Floe gRPC API and routes requests to workers.\n"
                   "Health turns SERVING once a worker has described its model. SIGTERM drains.");
  parser.AddString("workers", &f.workers, "comma-separated worker addresses");
  parser.AddString("config", &f.config, "JSON file {\"workers\": [\"host:port\", ...]} (adds to --workers)");
  parser.AddString("tokenizer", &f.tokenizer, "tokenizer.json, or the model folder holding it");
  parser.AddString("model-name", &f.model_name, "model name clients use (default: the workers')");
  parser.AddString("host", &f.host, "address to bind");
  parser.AddInt("port", &f.port, "port to bind (0: any free port)");
  parser.AddString("policy", &f.policy, "session-affinity|least-outstanding");
  parser.AddInt("max-in-flight", &f.max_in_flight, "requests relayed at once");
  parser.AddInt("max-queued", &f.max_queued, "requests waiting for a slot; beyond: RESOURCE_EXHAUSTED at once");
  parser.AddInt("queue-timeout-ms", &f.queue_timeout_ms, "longest wait for a slot");
  parser.AddInt("overload-outstanding", &f.overload_outstanding,
                "session affinity falls back to least-outstanding at this many requests on the chosen worker");
  parser.AddInt("max-retries", &f.max_retries, "retries on other workers when one fails before any token");
  parser.AddInt("health-interval-ms", &f.health_interval_ms, "worker health/load poll period");
  parser.AddInt("max-message-bytes", &f.max_message_bytes, "largest request message accepted");
  parser.AddInt("drain-timeout-s", &f.drain_timeout_s, "seconds SIGTERM waits for running requests");
  parser.AddInt("metrics-port", &f.metrics_port, "Prometheus /metrics port (0: any free port; -1: off)");
  parser.AddInt("http-port", &f.http_port, "OpenAI-compatible HTTP API port (0: any free port; -1: off)");
  parser.AddInt("http-threads", &f.http_threads, "HTTP I/O threads (streams hold no thread)");
  parser.AddString("api-key-file", &f.api_key_file,
                   "API keys: lines \"SHA256_HEX TENANT [admin]\"; clients send \"authorization: Bearer KEY\"");
  parser.AddDouble("rate-limit-rps", &f.rate_limit_rps, "requests per second per tenant (0: no limit)");
  parser.AddDouble("rate-limit-tps", &f.rate_limit_tps,
                   "tokens (prompt + max_tokens) per second per tenant (0: no limit)");
  parser.AddString("chat-template", &f.chat_template,
                   "Jinja chat template file (default: tokenizer_config.json's chat_template)");
  AddTlsFlags(parser, &f.tls);
  parser.AddBool("reflection", &f.reflection, "serve gRPC server reflection (off: it lists every method to any caller)");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe-router")) return *exit_code;
  auto addresses = WorkerAddresses(f);
  if (!addresses.ok()) {
    std::fprintf(stderr, "floe-router: %s\n", std::string(addresses.status().message()).c_str());
    return 2;
  }
  if (f.tokenizer.empty()) {
    std::fprintf(stderr, "floe-router: --tokenizer is required (see --help)\n");
    return 2;
  }
  if (f.policy != "session-affinity" && f.policy != "least-outstanding") {
    std::fprintf(stderr, "floe-router: --policy must be session-affinity or least-outstanding\n");
    return 2;
  }
  if (absl::Status s = ValidateTlsOptions(f.tls); !s.ok()) {
    std::fprintf(stderr, "floe-router: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  StartupClock startup("router");
  startup.Phase("init");
  auto tokenizer = Tokenizer::Load(f.tokenizer);
  if (!tokenizer.ok()) {
    LogEvent(LogLevel::kError, "router", "tokenizer_failed", {{"error", std::string(tokenizer.status().message())}});
    return 1;
  }
  startup.Phase("tokenizer");
  WorkerPoolOptions pool_options;
  pool_options.poll_interval = std::chrono::milliseconds(f.health_interval_ms);
  pool_options.credentials = *MakeChannelCredentials(f.tls);  // validated above
  WorkerPool pool(*addresses, pool_options);
  pool.Start();
  std::unique_ptr<WorkerPicker> picker = f.policy == "least-outstanding"
                                             ? MakeLeastOutstandingPicker(&pool)
                                             : MakeSessionAffinityPicker(&pool, f.overload_outstanding);
  AdmissionGate gate(f.max_in_flight, f.max_queued, std::chrono::milliseconds(f.queue_timeout_ms));
  std::optional<ApiKeys> api_keys;
  if (!f.api_key_file.empty()) {
    auto loaded = ApiKeys::Load(f.api_key_file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "floe-router: %s\n", std::string(loaded.status().message()).c_str());
      return 2;
    }
    api_keys = *std::move(loaded);
    LogEvent(LogLevel::kInfo, "router", "api_keys_loaded", {{"keys", static_cast<int64_t>(api_keys->size())}});
  }
  RateLimiter rate_limiter(f.rate_limit_rps, f.rate_limit_tps);
  RouterServiceOptions options;
  options.model_name = f.model_name;
  options.api_keys = api_keys ? &*api_keys : nullptr;
  options.rate_limiter = rate_limiter.enabled() ? &rate_limiter : nullptr;
  options.max_retries = f.max_retries;
  RouterService service(options, tokenizer->get(), &pool, picker.get(), &gate);
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<RouterMetrics> metrics;
  if (f.metrics_port >= 0) {
    auto started = MetricsServer::Start({.host = f.host,
                                          .port = f.metrics_port,
                                          .tls_cert_file = f.tls.cert_file,
                                          .tls_key_file = f.tls.key_file,
                                          .tls_client_ca_file = f.tls.client_ca_file});
    if (!started.ok()) {
      LogEvent(LogLevel::kError, "router", "metrics_failed", {{"error", std::string(started.status().message())}});
      return 1;
    }
    metrics_server = std::move(started).value();
    metrics = std::make_unique<RouterMetrics>(*metrics_server, &pool, &gate);
    service.SetMetrics(metrics.get());
    std::printf("metrics router %s\n", metrics_server->url().c_str());
  }
  std::unique_ptr<http::Server> http_server;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<openai::Frontend> frontend;
  if (f.http_port >= 0) {
    auto loaded = LoadChatTemplate(f, **tokenizer);
    if (!loaded.ok()) {
      LogEvent(LogLevel::kError, "router", "chat_template_failed", {{"error", std::string(loaded.status().message())}});
      std::fprintf(stderr, "floe-router: chat template: %s\n", std::string(loaded.status().message()).c_str());
      return 1;
    }
    chat_template = *std::move(loaded);
    if (!chat_template) LogEvent(LogLevel::kWarning, "router", "no_chat_template", {{"effect", "/v1/chat/completions refused"}});
    frontend = std::make_unique<openai::Frontend>(&service, chat_template.get(), [&service] {
      return service.model_info().has_value() && !service.draining();
    });
    http::ServerOptions http_options;
    http_options.host = f.host;
    http_options.port = f.http_port;
    http_options.threads = f.http_threads;
    http_options.max_body_bytes = static_cast<size_t>(f.max_message_bytes);
    http_options.tls_cert_file = f.tls.cert_file;
    http_options.tls_key_file = f.tls.key_file;
    http_options.tls_client_ca_file = f.tls.client_ca_file;
    auto started = http::Server::Start(http_options, [&frontend](http::Request request, std::shared_ptr<http::Exchange> exchange) {
      frontend->Handle(std::move(request), std::move(exchange));
    });
    if (!started.ok()) {
      LogEvent(LogLevel::kError, "router", "http_listen_failed", {{"error", std::string(started.status().message())}});
      return 1;
    }
    http_server = *std::move(started);
    std::printf("http bound to %s\n", http_server->address().c_str());
  }
  ServerOptions server_options;
  server_options.address = absl::StrCat(f.host, ":", f.port);
  server_options.max_message_bytes = f.max_message_bytes;
  server_options.tls = f.tls;
  server_options.reflection = f.reflection;
  auto runner = ServerRunner::Start(server_options, {&service});
  if (!runner.ok()) {
    LogEvent(LogLevel::kError, "router", "listen_failed", {{"error", std::string(runner.status().message())}});
    return 1;
  }
  std::printf("router bound to %s\n", (*runner)->address().c_str());
  std::fflush(stdout);
  startup.Phase("grpc_start");

  // Serve once some worker is healthy (its load poll answered) and has
  // described the model; keep asking until then. Serving before a worker is
  // healthy would answer the first requests "no worker left to try".
  floe::v1::ModelInfo info;
  for (;;) {
    if (pool.healthy_count() > 0 && pool.FetchModelInfo(&info, std::chrono::milliseconds(500))) break;
    if (auto signal = termination.WaitFor(std::chrono::milliseconds(50))) {
      LogEvent(LogLevel::kInfo, "router", "stopped_before_ready");
      return 0;
    }
  }
  startup.Phase("workers_ready");
  service.SetModelInfo(info);
  (*runner)->SetServing(true);
  LogEvent(LogLevel::kInfo, "router", "ready",
           {{"address", (*runner)->address()},
            {"workers", static_cast<int64_t>(addresses->size())},
            {"model", f.model_name.empty() ? info.name() : f.model_name},
            {"policy", f.policy},
            {"startup_ms", startup.SinceStartMs()}});

  int signal = termination.Wait();
  LogEvent(LogLevel::kInfo, "router", "draining", {{"signal", static_cast<int64_t>(signal)}});
  service.StartDraining();
  (*runner)->DrainAndShutdown([&] { return service.in_flight(); }, std::chrono::seconds(f.drain_timeout_s));
  if (http_server) http_server->Shutdown();
  LogEvent(LogLevel::kInfo, "router", "stopped");
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Run(argc, argv); }
