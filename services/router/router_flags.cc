#include "services/router/router_flags.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli/arg_parser.h"

namespace floe {
namespace {

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

}  // namespace

void AddRouterFlags(ArgParser& parser, RouterFlags* f) {
  parser.AddString("workers", &f->workers, "comma-separated worker addresses");
  parser.AddString("config", &f->config, "JSON file {\"workers\": [\"host:port\", ...]} (adds to --workers)");
  parser.AddString("tokenizer", &f->tokenizer, "tokenizer.json, or the model folder holding it");
  parser.AddString("model-name", &f->model_name, "model name clients use (default: the workers')");
  parser.AddString("policy", &f->policy, "session-affinity|least-outstanding");
  parser.AddInt("max-in-flight", &f->max_in_flight, "requests relayed at once");
  parser.AddInt("max-queued", &f->max_queued, "requests waiting for a slot; beyond: RESOURCE_EXHAUSTED at once");
  parser.AddInt("queue-timeout-ms", &f->queue_timeout_ms, "longest wait for a slot");
  parser.AddInt("overload-outstanding", &f->overload_outstanding,
                "session affinity falls back to least-outstanding at this many requests on the chosen worker");
  parser.AddInt("max-retries", &f->max_retries, "retries on other workers when one fails before any token");
  parser.AddInt("health-interval-ms", &f->health_interval_ms, "worker health/load poll period");
  parser.AddInt("max-message-bytes", &f->max_message_bytes, "largest request message accepted");
  parser.AddInt("http-port", &f->http_port, "OpenAI-compatible HTTP API port (0: any free port; -1: off)");
  parser.AddInt("http-threads", &f->http_threads, "HTTP I/O threads (streams hold no thread)");
  parser.AddString("api-key-file", &f->api_key_file,
                   "API keys: lines \"SHA256_HEX TENANT [admin]\"; clients send \"authorization: Bearer KEY\"");
  parser.AddDouble("rate-limit-rps", &f->rate_limit_rps, "requests per second per tenant (0: no limit)");
  parser.AddDouble("rate-limit-tps", &f->rate_limit_tps,
                   "tokens (prompt + max_tokens) per second per tenant (0: no limit)");
  parser.AddString("chat-template", &f->chat_template,
                   "Jinja chat template file (default: tokenizer_config.json's chat_template)");
  parser.AddString("tool-call-parser", &f->tool_call_parser,
                   "how chat outputs of requests with tools are read for tool calls: auto (from the chat template's "
                   "markers), none, hermes, llama3_json or pythonic");
  parser.AddBool("strict-fields", &f->strict_fields,
                 "refuse (400) the OpenAI and vLLM request fields Floe ignores (store, metadata, service_tier, ...) "
                 "instead of accepting them with a counter (floe_http_ignored_fields_total)");
}

absl::StatusOr<std::vector<std::string>> PlanWorkers(const RouterFlags& f) {
  auto addresses = WorkerAddresses(f);
  if (!addresses.ok()) return addresses.status();
  if (f.tokenizer.empty()) return absl::InvalidArgumentError("--tokenizer is required (see --help)");
  if (f.policy != "session-affinity" && f.policy != "least-outstanding")
    return absl::InvalidArgumentError("--policy must be session-affinity or least-outstanding");
  return addresses;
}

}  // namespace floe
