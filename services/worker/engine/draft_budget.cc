#include "services/worker/engine/draft_budget.h"

#include <algorithm>

namespace floe {

DraftAcceptanceStats::DraftAcceptanceStats(int max_positions, double window, int64_t idle_tokens)
    : drafted_(std::max(0, max_positions), 0.0),
      accepted_(std::max(0, max_positions), 0.0),
      window_(window),
      idle_tokens_(idle_tokens) {}

void DraftAcceptanceStats::Halve() {
  for (double& d : drafted_) d /= 2;
  for (double& a : accepted_) a /= 2;
}

void DraftAcceptanceStats::Age(int64_t emitted) {
  tokens_since_draft_ += emitted;
  if (tokens_since_draft_ < idle_tokens_) return;
  tokens_since_draft_ = 0;
  Halve();
}

void DraftAcceptanceStats::Record(int drafted, int accepted) {
  if (drafted <= 0 || drafted_.empty()) return;
  drafted = std::min<int>(drafted, static_cast<int>(drafted_.size()));
  accepted = std::clamp(accepted, 0, drafted);
  for (int j = 0; j < drafted; ++j) drafted_[j] += 1;
  for (int j = 0; j < accepted; ++j) accepted_[j] += 1;
  tokens_since_draft_ = 0;
  if (drafted_[0] >= window_) Halve();
}

double DraftAcceptanceStats::Cumulative(int position) const {
  double p = 1.0;
  const int last = std::min<int>(position, static_cast<int>(drafted_.size()) - 1);
  for (int j = 0; j <= last; ++j) {
    if (drafted_[j] >= kMinSamples) p = std::min(p, accepted_[j] / drafted_[j]);
  }
  return p;
}

namespace {

template <typename Cumulative>
std::vector<int> PlanLengths(int64_t step_tokens, int emitting, std::span<const int> caps,
                             const Cumulative& cumulative, const DraftCostModel& model) {
  std::vector<int> lengths(caps.size(), 0);
  int64_t budget = model.threshold - step_tokens;
  int max_cap = 0;
  for (int c : caps) max_cap = std::max(max_cap, c);
  double expected = std::max(1, emitting);  // tokens the step emits
  double tokens = static_cast<double>(step_tokens);
  for (int j = 0; j < max_cap && budget > 0; ++j) {
    const double p = cumulative(j);
    for (size_t i = 0; i < caps.size() && budget > 0; ++i) {
      if (caps[i] <= j || lengths[i] != j) continue;
      if (model.step_overhead_tokens >= 0 && p <= expected / (model.step_overhead_tokens + tokens)) return lengths;
      ++lengths[i];
      --budget;
      expected += p;
      tokens += 1;
    }
  }
  return lengths;
}

}  // namespace

std::vector<int> PlanDraftLengths(int64_t step_tokens, int emitting, std::span<const int> caps,
                                  const DraftAcceptanceStats& stats, const DraftCostModel& model) {
  return PlanLengths(step_tokens, emitting, caps, [&](int j) { return stats.Cumulative(j); }, model);
}

std::vector<int> PlanDraftLengths(int64_t step_tokens, int emitting, std::span<const int> caps,
                                  std::span<const DraftAcceptanceStats> stats, const DraftCostModel& model) {
  return PlanLengths(
      step_tokens, emitting, caps,
      [&](int j) {
        double p = 0.0;
        for (const DraftAcceptanceStats& s : stats) p = std::max(p, s.Cumulative(j));
        return p;
      },
      model);
}

}  // namespace floe
