// Output of `floe bench`: the JSON result (config, summary, one record per
// request), the human summary table, the side-by-side comparison, and the
// gnuplot figures.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "services/cli/bench/load_generator.h"
#include "services/cli/bench/metrics.h"

namespace floe::bench {

// One measured run: a point of a sweep, or one server of a comparison.
struct LabeledRun {
  std::string label;      // e.g. "concurrency=4" or the address
  double sweep_value = 0; // the swept rate or concurrency (0 outside sweeps)
  RunResult result;
  Summary summary;
};

nlohmann::json SummaryJson(const Summary& s);
nlohmann::json RecordJson(const RequestRecord& r);
// {label, summary, aborted, abort_reason, not_sent, requests: [...]}.
nlohmann::json RunJson(const LabeledRun& run);

std::string SummaryTable(const LabeledRun& run);
// Columns: a, b, b/a.
std::string CompareTable(const LabeledRun& a, const LabeledRun& b);
// One line per sweep point: value, req/s, output tok/s, TTFT/TPOT/E2E p50/p99.
std::string SweepTable(const std::vector<LabeledRun>& runs);

// Latency CDFs (TTFT, TPOT, ITL, E2E) of every run, and, for a sweep of more
// than one point, output throughput against median/p99 TPOT and TTFT. Needs
// `gnuplot` on PATH.
absl::Status WritePlots(const std::string& dir, const std::vector<LabeledRun>& runs, bool is_sweep);

}  // namespace floe::bench
