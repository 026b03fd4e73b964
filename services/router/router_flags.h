// floe-router's own flags (the ones every service shares are
// common/service/service_bootstrap.h's) and what main() derives from them
// before anything starts: the worker addresses, checked.
//
// Thread: main's, at start.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace floe {

class ArgParser;

struct RouterFlags {
  std::string workers;
  std::string config;
  std::string tokenizer;
  std::string model_name;
  std::string policy = "session-affinity";
  int max_in_flight = 256;
  int max_queued = 256;
  int queue_timeout_ms = 2000;
  int overload_outstanding = 32;
  int max_retries = 2;
  int health_interval_ms = 250;
  int max_message_bytes = 4 << 20;
  int http_port = -1;
  int http_threads = 2;
  std::string chat_template;
  bool strict_fields = false;
  std::string tool_call_parser = "auto";
  std::string api_key_file;
  double rate_limit_rps = 0, rate_limit_tps = 0;
};

void AddRouterFlags(ArgParser& parser, RouterFlags* flags);

// The workers of --workers and --config, after checking the flags that need
// no file but --config: INVALID_ARGUMENT naming the flag (exit 2).
absl::StatusOr<std::vector<std::string>> PlanWorkers(const RouterFlags& flags);

}  // namespace floe
