// Workloads: what `floe bench` sends. A workload is a list of jobs; a job is
// one request, or the turns of one agent session (sent one after another, each
// turn resending the growing history). Every generator is deterministic in its
// seed, so two servers (--compare) or two runs get identical requests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace floe::bench {

struct Turn {
  std::vector<int32_t> prompt;  // this turn's new tokens (the whole prompt outside sessions)
  int output_len = 0;           // max_tokens
};

struct Job {
  std::string session_id;       // set for session workloads
  std::vector<Turn> turns;      // one outside session workloads
  // Session turns: the request is history + prompt, history growing by each
  // turn's prompt and the tokens the server returned.
  bool grow_history = false;
  // Arrival offset in seconds from a timestamped trace; < 0 lets the load
  // generator schedule the job.
  double arrival_s = -1;
};

int CountRequests(const std::vector<Job>& jobs);

struct RandomSpec {
  int num_requests = 0;
  int input_len = 0;
  int output_len = 0;
  double range_ratio = 0;  // lengths uniform in [len*(1-r), len*(1+r)]
  int prefix_len = 0;      // shared prefix prepended to every prompt
  int vocab_size = 0;      // token ids are drawn from [0, vocab_size) ...
  std::vector<int32_t> excluded_ids;  // ... except these (EOS, BOS)
  uint64_t seed = 0;
};
absl::StatusOr<std::vector<Job>> RandomWorkload(const RandomSpec& spec);

// JSONL with `prompt` (token ids) and `output` (token ids) per line; output
// length = len(output) unless `output_len` > 0. Lines are reused from the top
// when `num_requests` exceeds them.
absl::StatusOr<std::vector<Job>> TraceWorkload(const std::string& path, int num_requests, int output_len);

// The same JSONL grouped by its `session` field, in order of first appearance;
// sessions are taken until `num_requests` turns are collected.
absl::StatusOr<std::vector<Job>> SessionWorkload(const std::string& path, int num_requests, int output_len);

// Timestamped arrivals: CSV with a header naming `timestamp`, `input_len`
// (or input_length) and `output_len` (or output_length) columns, or JSONL
// objects with those keys. Timestamps in seconds, shifted to start at 0;
// prompts are random ids as in RandomWorkload.
absl::StatusOr<std::vector<Job>> ArrivalTraceWorkload(const std::string& path, const RandomSpec& ids);

}  // namespace floe::bench
