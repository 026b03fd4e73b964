// Serving metrics with the definitions of `vllm bench serve` (see
// /work/shared/reference/serving-anchors.md, section c), computed from
// per-request timelines recorded at the client. Pure functions: the load
// generator records, these summarize, so tests can feed synthetic timelines.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace floe::bench {

// One streamed chunk: when it arrived (ms after the request was sent) and how
// many tokens it carried (a chunk may hold several, e.g. speculative decoding).
struct ChunkEvent {
  double t_ms = 0;
  int tokens = 0;
};

// Everything measured about one request. Times are relative to the send.
struct RequestRecord {
  int index = 0;             // position in the workload
  std::string session_id;    // empty outside session workloads
  int turn = 0;              // turn within the session
  int prompt_tokens = 0;     // tokens sent
  int max_tokens = 0;        // output length asked for
  double start_s = 0;        // send time, seconds after the run began
  bool ok = false;
  int status_code = 0;       // gRPC status code; 0 when ok
  std::string error;
  std::string finish_reason;
  int output_tokens = 0;     // tokens received in chunks
  int usage_prompt_tokens = 0;      // as the server reported them
  int usage_completion_tokens = 0;
  int usage_cached_tokens = 0;
  double ttft_ms = -1;       // first chunk holding a token; -1 if none came
  double e2e_ms = 0;         // until the stream ended (or failed)
  std::vector<ChunkEvent> chunks;
};

// Per-request derived values.
double Tpot(const RequestRecord& r);  // (E2E - TTFT) / (tokens - 1); 0 for <= 1 token
// Inter-token latencies weighted per token: the gap before a chunk of k tokens
// counts as k gaps of gap/k; the extra tokens of the first chunk arrived with
// the first token and count as gaps of 0. So a request with T tokens yields
// T - 1 values, summing to (last chunk - first chunk).
std::vector<double> TokenItls(const RequestRecord& r);

// numpy.percentile's default (linear interpolation between closest ranks).
double Percentile(std::vector<double> values, double p);

struct LatencyStats {
  int count = 0;
  double mean = 0, stddev = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
LatencyStats Stats(const std::vector<double>& values);

// Service-level objectives for goodput; a negative value means "not set".
struct Slo {
  double ttft_ms = -1;
  double tpot_ms = -1;
  double e2e_ms = -1;
  bool empty() const { return ttft_ms < 0 && tpot_ms < 0 && e2e_ms < 0; }
};
// Parses "ttft:500 tpot:50 e2el:2000" (space- or comma-separated, ms).
absl::StatusOr<Slo> ParseSlo(const std::string& text);
bool MeetsSlo(const RequestRecord& r, const Slo& slo);

struct Summary {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;  // first send to last end, over all requests
  int64_t total_input_tokens = 0;   // prompts of completed requests
  int64_t total_output_tokens = 0;  // tokens received by completed requests
  int64_t total_cached_tokens = 0;
  double request_throughput = 0;     // completed / duration
  double output_throughput = 0;      // output tokens / duration
  double total_token_throughput = 0; // (input + output) / duration
  int good_requests = 0;
  double goodput = 0;                // requests meeting every SLO / duration; 0 without SLOs
  double peak_output_throughput = 0; // most tokens received in one 1-second bucket
  int peak_concurrency = 0;          // most requests in flight at once
  LatencyStats ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::map<std::string, int> failures_by_code;  // status name -> count
};

// `records` may hold failures; latency stats use completed requests only.
Summary Summarize(const std::vector<RequestRecord>& records, const Slo& slo);

}  // namespace floe::bench
