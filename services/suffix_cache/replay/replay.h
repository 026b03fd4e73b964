// The suffix replay simulation (docs: /work/shared/reference/suffix-replay.md):
// requests replayed one at a time against one speculator; each step drafts
// from prompt + output so far, accepts the longest prefix that matches the
// true output, emits it plus one bonus token, and appends what it emitted.
// The speculator runs in this process, or is a floe-suffix-cache service
// (ReplayOptions::server): one Step RPC per step carries the previous step's
// tokens and asks for the draft, as an engine's step does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/suffix_cache/replay/trace.h"
#include "services/suffix_cache/suffix_tree/suffix_speculator.h"

namespace floe::suffix_cache {

struct ReplayOptions {
  SpeculatorConfig speculator;
  DraftParams draft;
  bool ngram = false;  // baseline instead of the suffix speculator
  int ngram_n = 3;
  int ngram_k = 10;
  // Responses cached before the trace's first request (each started with an
  // empty prompt, appended whole, stopped): a large cache for scale runs.
  // Ignored by the n-gram baseline; in process only.
  std::vector<std::vector<int32_t>> prefill;
  // "host:port" of a floe-suffix-cache to replay against instead of an
  // in-process speculator. It must run with speculator.max_depth,
  // max_cached_requests and eviction (checked first: FailedPrecondition),
  // and hold no responses of this trace's namespace yet. Requests go to
  // namespace `server_namespace`.
  std::string server;
  std::string server_namespace = "replay";
  // Deadline of each call (a Step carries one step; Start indexes a whole
  // prompt).
  int64_t server_deadline_ms = 10000;
};

struct ReplayResult {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t steps = 0;
  int64_t accepted_tokens = 0;
  int64_t drafted_tokens = 0;
  int64_t empty_draft_steps = 0;
  std::vector<double> speculate_us;  // one per step
  // Steps by draft length and by accepted length (index = tokens).
  std::vector<int64_t> drafted_histogram;
  std::vector<int64_t> accepted_histogram;
  double append_us = 0;              // total
  double start_us = 0;
  double stop_us = 0;
  double wall_s = 0;
  double prefill_s = 0;  // caching options.prefill (not in wall_s)
  int64_t prefill_tokens = 0;
  int64_t cached_tokens = 0;  // global tree at the end
  int64_t evictions = 0;
  size_t global_tree_bytes = 0;  // against a server: its namespace's tree
};

// Replays `trace` against a fresh speculator (or the n-gram baseline).
absl::StatusOr<ReplayResult> RunReplay(const std::vector<TraceRequest>& trace,
                                       const ReplayOptions& options);

}  // namespace floe::suffix_cache
