// How many draft tokens one engine step verifies, per sequence: the step's
// measured cost curve against the tokens drafts are expected to add.
//
// A step that runs N tokens takes t(N) (StepCostCurve: measured on the
// backend, tokens run -> step time, or the linear R + N). Sequence i's draft
// token at position j (0-based) is accepted with probability a_i^(j+1), a_i
// being that request's own acceptance rate (draft_selector.h: measured per
// request and proposer, a namespace's rate as the prior for its first steps,
// or the rate a suffix draft's own score implies where that is surer).
// The step emits E = (decoding sequences) + (expected accepted draft tokens),
// and the plan maximizes E / t(N) over every allocation of draft tokens:
// since t depends only on how many tokens run, the best allocation of m
// draft tokens is the m most probable ones (each sequence's in position
// order, so drafts stay prefixes), and the plan is the best m. So an agent
// session accepting 0.95 keeps long drafts while a chat request beside it in
// the same batch drafts nothing, drafts shrink as the batch grows, and a
// loaded server never runs slower for them (under the curve it measured).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace floe {

// Step time (any unit) as a function of the tokens a step runs.
class StepCostCurve {
 public:
  // t(N) = overhead + N: the fixed cost in tokens' worth of compute.
  static StepCostCurve Linear(double overhead_tokens);
  // Measured points (tokens run, step time): tokens > 0 strictly increasing,
  // times > 0. Interpolated linearly; below the first point, its time; past
  // the last, the last segment's slope (never below zero).
  static absl::StatusOr<StepCostCurve> FromPoints(std::vector<std::pair<int, double>> points);
  // A JSON file: {"step_cost_curve": [[tokens, ms], ...]} (what
  // `bench_verify_cost --write-curve FILE` and the worker's start-up
  // measurement write).
  static absl::StatusOr<StepCostCurve> Load(const std::string& path);

  double Time(int64_t tokens) const;
  const std::vector<std::pair<int, double>>& points() const { return points_; }
  std::string ToJson() const;

 private:
  std::vector<std::pair<int, double>> points_;
};

struct DraftCostModel {
  // Hard cap: a step verifies at most max(0, threshold - T) draft tokens, T
  // being its tokens without drafts.
  int threshold = 32;
  // False: only the threshold applies (every draft token within it runs).
  bool enabled = true;
  StepCostCurve curve = StepCostCurve::Linear(1.0);
  // Added to every step's curve time: what a step costs outside the
  // measured part (the engine's own work around the forward).
  double step_overhead = 0.0;
  double Time(int64_t tokens) const { return curve.Time(tokens) + step_overhead; }
};

// Draft lengths for the step's drafting sequences, parallel to `caps` (each
// sequence's own limit: k, max_tokens, context, the draft it has) and
// `rates` (each sequence's per-token acceptance a_i in [0, 1]);
// `step_tokens` = T, `emitting` = sequences that emit a token this step
// without drafts.
std::vector<int> PlanDraftLengths(int64_t step_tokens, int emitting, std::span<const int> caps,
                                  std::span<const double> rates, const DraftCostModel& model);

}  // namespace floe
