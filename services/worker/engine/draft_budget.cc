#include "services/worker/engine/draft_budget.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <queue>

#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

namespace floe {

StepCostCurve StepCostCurve::Linear(double overhead_tokens) {
  StepCostCurve curve;
  const double r = std::max(0.0, overhead_tokens);
  curve.points_ = {{1, r + 1.0}, {2, r + 2.0}};
  return curve;
}

absl::StatusOr<StepCostCurve> StepCostCurve::FromPoints(std::vector<std::pair<int, double>> points) {
  if (points.empty()) return absl::InvalidArgumentError("step cost curve: no points");
  if (points.size() > 4096) return absl::InvalidArgumentError("step cost curve: more than 4096 points");
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [tokens, time] = points[i];
    if (tokens <= 0 || !(time > 0) || !std::isfinite(time))
      return absl::InvalidArgumentError(
          absl::StrCat("step cost curve: point ", i, " (", tokens, ", ", time, ") needs tokens > 0 and time > 0"));
    if (i > 0 && tokens <= points[i - 1].first)
      return absl::InvalidArgumentError(absl::StrCat("step cost curve: tokens must increase (point ", i, ")"));
  }
  StepCostCurve curve;
  curve.points_ = std::move(points);
  return curve;
}

absl::StatusOr<StepCostCurve> StepCostCurve::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("step cost curve: cannot read ", path));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step_cost_curve") || !j["step_cost_curve"].is_array())
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected {\"step_cost_curve\": [[tokens, ms], ...]}"));
  std::vector<std::pair<int, double>> points;
  for (const nlohmann::json& p : j["step_cost_curve"]) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": step_cost_curve[", points.size(), "] is not [tokens, ms]"));
    if (!p[0].is_number_integer() || p[0].get<int64_t>() < 1 || p[0].get<int64_t>() > (int64_t{1} << 24))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": step_cost_curve[", points.size(), "] tokens must be in [1, 2^24]"));
    points.emplace_back(p[0].get<int>(), p[1].get<double>());
  }
  auto curve = FromPoints(std::move(points));
  if (!curve.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", curve.status().message()));
  return curve;
}

double StepCostCurve::Time(int64_t tokens) const {
  const auto& p = points_;
  if (p.empty()) return static_cast<double>(std::max<int64_t>(1, tokens));  // default-constructed: one per token
  if (tokens <= p.front().first || p.size() == 1) {
    if (p.size() == 1) return p.front().second * std::max<double>(1.0, static_cast<double>(tokens) / p.front().first);
    return p.front().second;
  }
  size_t i = 1;
  while (i + 1 < p.size() && p[i].first < tokens) ++i;
  const double x0 = p[i - 1].first, y0 = p[i - 1].second, x1 = p[i].first, y1 = p[i].second;
  const double slope = std::max(0.0, (y1 - y0) / (x1 - x0));
  if (tokens >= x1) return y1 + slope * (static_cast<double>(tokens) - x1);
  return y0 + (y1 - y0) * (static_cast<double>(tokens) - x0) / (x1 - x0);
}

std::string StepCostCurve::ToJson() const {
  nlohmann::json j;
  j["step_cost_curve"] = nlohmann::json::array();
  for (const auto& [tokens, time] : points_) j["step_cost_curve"].push_back({tokens, time});
  return j.dump();
}

std::vector<int> PlanDraftLengths(int64_t step_tokens, int emitting, std::span<const int> caps,
                                  std::span<const double> rates, const DraftCostModel& model) {
  std::vector<int> lengths(caps.size(), 0);
  const int64_t budget = std::max<int64_t>(0, model.threshold - step_tokens);
  // Each sequence's next draft token, most probable first (ties: the lower
  // sequence index, so plans are deterministic).
  struct Next {
    double p;
    size_t seq;
    bool operator<(const Next& o) const { return p < o.p || (p == o.p && seq > o.seq); }
  };
  std::priority_queue<Next> next;
  std::vector<double> rate(caps.size());
  std::vector<int> taken(caps.size(), 0);
  for (size_t i = 0; i < caps.size(); ++i) {
    rate[i] = std::clamp(i < rates.size() ? rates[i] : 0.0, 0.0, 1.0);
    if (caps[i] > 0) next.push({rate[i], i});
  }
  // Take draft tokens in that order; the plan is the best prefix of it.
  std::vector<size_t> order;
  double expected = std::max(1, emitting);
  double best_value = expected / model.Time(std::max<int64_t>(1, step_tokens));
  size_t best = 0;
  while (!next.empty() && static_cast<int64_t>(order.size()) < budget) {
    const Next n = next.top();
    next.pop();
    order.push_back(n.seq);
    expected += n.p;
    if (++taken[n.seq] < caps[n.seq]) next.push({n.p * rate[n.seq], n.seq});
    if (!model.enabled) {
      best = order.size();
      continue;
    }
    const double value = expected / model.Time(step_tokens + static_cast<int64_t>(order.size()));
    if (value > best_value * (1 + 1e-12)) {
      best_value = value;
      best = order.size();
    }
  }
  for (size_t m = 0; m < best; ++m) ++lengths[order[m]];
  return lengths;
}

}  // namespace floe
