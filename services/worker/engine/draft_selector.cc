#include "services/worker/engine/draft_selector.h"

#include <cmath>

namespace floe {
namespace {

// Counts halve past this many observations, so rates follow the workload.
constexpr double kWindow = 4096;

}  // namespace

int HighestScoreSelector::Choose(const Sequence& seq, std::span<DraftCandidate> candidates,
                                 double overhead_tokens) {
  (void)seq, (void)overhead_tokens;
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (best < 0 || candidates[i].proposal->score > candidates[best].proposal->score) best = static_cast<int>(i);
  return best;
}

AcceptanceRateSelector::AcceptanceRateSelector(int num_proposers, double prior_weight, size_t max_namespaces)
    : num_proposers_(num_proposers),
      prior_weight_(prior_weight),
      max_namespaces_(max_namespaces),
      global_(num_proposers) {}

void AcceptanceRateSelector::Add(std::vector<Counts>& counts, int proposer, int successes, int failures) {
  Counts& c = counts[proposer];
  c.successes += successes;
  c.failures += failures;
  if (c.successes + c.failures > kWindow) {
    c.successes /= 2;
    c.failures /= 2;
  }
}

double AcceptanceRateSelector::PriorRate(const std::string& ns, int proposer) const {
  auto rate = [](const Counts& c) { return c.successes / (c.successes + c.failures); };
  auto it = namespaces_.find(ns);
  if (it != namespaces_.end() && it->second[proposer].successes + it->second[proposer].failures >= 1)
    return rate(it->second[proposer]);
  if (global_[proposer].successes + global_[proposer].failures >= 1) return rate(global_[proposer]);
  return 1.0;
}

double AcceptanceRateSelector::Rate(const Sequence& seq, int proposer) const {
  double successes = 0, failures = 0;
  if (proposer < static_cast<int>(seq.proposer_acceptance.size())) {
    successes = seq.proposer_acceptance[proposer].successes;
    failures = seq.proposer_acceptance[proposer].failures;
  }
  const double prior = PriorRate(seq.request.speculation.ns, proposer);
  return (successes + prior_weight_ * prior) / (successes + failures + prior_weight_);
}

double AcceptanceRateSelector::Value(double rate, int length, double overhead_tokens) {
  // 1 + a + ... + a^L
  double emitted = 1.0, term = 1.0;
  for (int j = 0; j < length; ++j) {
    term *= rate;
    emitted += term;
  }
  return emitted / (std::max(0.0, overhead_tokens) + 1.0 + length);
}

int AcceptanceRateSelector::Choose(const Sequence& seq, std::span<DraftCandidate> candidates,
                                   double overhead_tokens) {
  int best = -1;
  double best_value = 0.0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double rate = Rate(seq, candidates[i].proposer);
    double value = -1.0;
    int best_length = candidates[i].length;
    for (int length = 1; length <= candidates[i].length; ++length) {
      const double v = Value(rate, length, overhead_tokens);
      if (v > value) value = v, best_length = length;
    }
    if (overhead_tokens >= 0) candidates[i].length = best_length;
    if (best < 0 || value > best_value) {
      best = static_cast<int>(i);
      best_value = value;
    }
  }
  // The cost model off: always the best draft.
  if (overhead_tokens < 0) return best;
  return best_value > Value(0.0, 0, overhead_tokens) ? best : -1;
}

bool AcceptanceRateSelector::MayChoose(const Sequence& seq, int proposer, int max_length,
                                       double overhead_tokens) const {
  if (overhead_tokens < 0) return true;
  const double rate = Rate(seq, proposer), none = Value(0.0, 0, overhead_tokens);
  for (int length = 1; length <= max_length; ++length)
    if (Value(rate, length, overhead_tokens) > none) return true;
  return false;
}

void AcceptanceRateSelector::Record(Sequence& seq, int proposer, int drafted, int accepted) {
  if (proposer < 0 || proposer >= num_proposers_ || drafted <= 0) return;
  const int failures = accepted < drafted ? 1 : 0;
  if (seq.proposer_acceptance.size() < static_cast<size_t>(num_proposers_))
    seq.proposer_acceptance.resize(num_proposers_);
  seq.proposer_acceptance[proposer].successes += accepted;
  seq.proposer_acceptance[proposer].failures += failures;
  Add(global_, proposer, accepted, failures);
  const std::string& ns = seq.request.speculation.ns;
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) {
    // Bounded: past the cap, namespaces start over (the global prior remains).
    if (namespaces_.size() >= max_namespaces_) namespaces_.clear();
    it = namespaces_.emplace(ns, std::vector<Counts>(num_proposers_)).first;
  }
  Add(it->second, proposer, accepted, failures);
}

}  // namespace floe
