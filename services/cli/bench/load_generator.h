// Drives a workload against a Backend: open loop (arrivals from a Poisson or
// gamma process, optionally ramping the rate) and/or closed loop (at most
// `max_concurrency` jobs in flight). Jobs run on their own threads; the
// session turns of one job run in order on that thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "floe/v1/generate.pb.h"
#include "services/cli/bench/metrics.h"
#include "services/cli/bench/workload.h"

namespace floe::bench {

struct TurnRequest {
  std::string session_id;
  std::vector<int32_t> prompt;
  int max_tokens = 0;
};

// Sends one request and records its timeline. Called from many threads at once.
class Backend {
 public:
  virtual ~Backend() = default;
  // Fills the measured fields of `record` (its index, session, turn and
  // start_s are set by the caller); appends the returned token ids to `output`.
  virtual void Send(const TurnRequest& request, RequestRecord* record, std::vector<int32_t>* output) = 0;
  // The served model, with a short deadline: the probe that tells a dead or
  // wrong address apart before any load is sent.
  virtual absl::StatusOr<floe::v1::ModelInfo> GetModelInfo(double /*timeout_s*/) {
    return absl::UnimplementedError("this backend cannot describe the model");
  }
};

struct LoadOptions {
  // Requests per second; infinity sends every job at t = 0.
  double request_rate = std::numeric_limits<double>::infinity();
  // Gamma shape of the inter-arrival times: 1 is Poisson, < 1 burstier.
  double burstiness = 1.0;
  // 0: no cap (pure open loop).
  int max_concurrency = 0;
  // Ramp-up (as vllm bench serve): the rate moves from ramp_start_rate to
  // ramp_end_rate across the requests, "linear" or "exponential"; empty: off.
  std::string ramp_up;
  double ramp_start_rate = 0;
  double ramp_end_rate = 0;
  uint64_t seed = 0;
  // Stop sending new jobs after this many failures in a row (a dead server
  // must end the run, not stall it); 0 disables.
  int abort_after_consecutive_failures = 8;
  bool progress = false;  // live progress line on stderr
};

// Send offsets (seconds) of `n` jobs; jobs with a trace arrival keep it.
std::vector<double> ArrivalTimes(const std::vector<Job>& jobs, const LoadOptions& options);

struct RunResult {
  std::vector<RequestRecord> records;  // every request sent, in workload order
  double duration_s = 0;
  bool aborted = false;
  std::string abort_reason;
  int not_sent = 0;  // requests skipped after an abort
};

RunResult RunLoad(const std::vector<Job>& jobs, Backend& backend, const LoadOptions& options);

}  // namespace floe::bench
