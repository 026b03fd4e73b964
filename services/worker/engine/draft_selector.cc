#include "services/worker/engine/draft_selector.h"

#include <algorithm>
#include <cmath>

namespace floe {
namespace {

// Counts halve past this many observations, so rates follow the workload.
constexpr double kWindow = 4096;
// ... and after this many emitted tokens without a verified draft.
constexpr int64_t kIdleTokens = 4096;
// A request's own record halves every this many steps it could draft.
constexpr int32_t kRequestWindow = 16;

int ClaimBand(int offered) { return offered <= 1 ? 0 : offered <= 3 ? 1 : offered <= 7 ? 2 : 3; }

// auto: Counts is the selector's private type.
void Halve(auto& counts) {
  counts.successes /= 2;
  counts.failures /= 2;
  for (auto& claim : counts.claims) {
    claim.claimed /= 2;
    claim.accepted /= 2;
  }
}

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
      global_(num_proposers),
      idle_tokens_(num_proposers, 0) {}

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
  // Each level shrinks towards the one above with prior_weight_
  // pseudo-observations: all requests towards 1 (optimistic, so a proposer
  // is measured before it is judged), a namespace towards all requests.
  auto blend = [&](const Counts& c, double above) {
    return (c.successes + prior_weight_ * above) / (c.successes + c.failures + prior_weight_);
  };
  const double global = blend(global_[proposer], 1.0);
  auto it = namespaces_.find(ns);
  return it == namespaces_.end() ? global : blend(it->second[proposer], global);
}

void AcceptanceRateSelector::Age(int64_t emitted) {
  for (int p = 0; p < num_proposers_; ++p) {
    idle_tokens_[p] += emitted;
    if (idle_tokens_[p] < kIdleTokens) continue;
    // Nothing verified from p for a while (it may have been judged on a bad
    // patch): forget half of what is known, so it is probed again.
    idle_tokens_[p] = 0;
    Halve(global_[p]);
    for (auto& [ns, counts] : namespaces_) Halve(counts[p]);
  }
}

double AcceptanceRateSelector::Rate(const Sequence& seq, int proposer, bool own) const {
  const double prior = PriorRate(seq.request.speculation.ns, proposer);
  return own ? RateWithPrior(seq, proposer, prior) : prior;
}

double AcceptanceRateSelector::RateWithPrior(const Sequence& seq, int proposer, double prior) const {
  double successes = 0, failures = 0;
  if (proposer >= 0 && proposer < static_cast<int>(seq.proposer_acceptance.size())) {
    successes = seq.proposer_acceptance[proposer].successes;
    failures = seq.proposer_acceptance[proposer].failures;
  }
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
    if (overhead_tokens < 0) {
      // No cost model: the most expected emitted tokens, drafts uncut.
      value = Value(rate, candidates[i].length, 0.0) * (1.0 + candidates[i].length);
    } else {
      int best_length = candidates[i].length;
      for (int length = 1; length <= candidates[i].length; ++length) {
        const double v = Value(rate, length, overhead_tokens);
        if (v > value) value = v, best_length = length;
      }
      candidates[i].length = best_length;
    }
    if (best < 0 || value > best_value) {
      best = static_cast<int>(i);
      best_value = value;
    }
  }
  // The cost model off: always the best draft.
  if (overhead_tokens < 0) return best;
  return best_value > Value(0.0, 0, overhead_tokens) ? best : -1;
}

void AcceptanceRateSelector::AgeRequest(Sequence& seq, int proposer) {
  if (proposer < 0 || proposer >= num_proposers_) return;
  if (seq.proposer_acceptance.size() < static_cast<size_t>(num_proposers_))
    seq.proposer_acceptance.resize(num_proposers_);
  Sequence::Acceptance& own = seq.proposer_acceptance[proposer];
  if (++own.asked >= kRequestWindow) {
    own.asked = 0;
    own.successes /= 2;
    own.failures /= 2;
  }
}

bool AcceptanceRateSelector::MayChoose(Sequence& seq, int proposer, int max_length, double overhead_tokens) {
  AgeRequest(seq, proposer);
  if (overhead_tokens < 0) return true;
  const double rate = Rate(seq, proposer), none = Value(0.0, 0, overhead_tokens);
  for (int length = 1; length <= max_length; ++length)
    if (Value(rate, length, overhead_tokens) > none) return true;
  return false;
}

void AcceptanceRateSelector::Record(Sequence& seq, int proposer, int drafted, int accepted) {
  if (proposer < 0 || proposer >= num_proposers_ || drafted <= 0) return;
  const int failures = accepted < drafted ? 1 : 0;
  idle_tokens_[proposer] = 0;
  if (seq.proposer_acceptance.size() < static_cast<size_t>(num_proposers_))
    seq.proposer_acceptance.resize(num_proposers_);
  seq.proposer_acceptance[proposer].successes += accepted;
  seq.proposer_acceptance[proposer].failures += failures;
  Add(global_, proposer, accepted, failures);
  Add(NamespaceCounts(seq.request.speculation.ns), proposer, accepted, failures);
}

std::vector<AcceptanceRateSelector::Counts>& AcceptanceRateSelector::NamespaceCounts(const std::string& ns) {
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) {
    // Bounded: past the cap, namespaces start over (the global prior remains).
    if (namespaces_.size() >= max_namespaces_) namespaces_.clear();
    it = namespaces_.emplace(ns, std::vector<Counts>(num_proposers_)).first;
  }
  return it->second;
}

double AcceptanceRateSelector::ClaimCalibration(const Sequence& seq, int proposer, int offered) const {
  if (proposer < 0 || proposer >= num_proposers_) return 1.0;
  const int band = ClaimBand(offered);
  auto blend = [&](const Claim& c, double above) {
    return std::min(1.0, (c.accepted + prior_weight_ * above) / (c.claimed + prior_weight_));
  };
  const double global = blend(global_[proposer].claims[band], 1.0);
  auto it = namespaces_.find(seq.request.speculation.ns);
  return it == namespaces_.end() ? global : blend(it->second[proposer].claims[band], global);
}

void AcceptanceRateSelector::RecordClaim(const Sequence& seq, int proposer, int offered, double claimed_rate,
                                         int drafted, int accepted) {
  if (proposer < 0 || proposer >= num_proposers_ || !(claimed_rate >= 0 && claimed_rate <= 1) || drafted <= 0 ||
      accepted < 0 || accepted > drafted)
    return;
  double claimed = 0, term = 1;
  for (int j = 0; j < drafted; ++j) claimed += (term *= claimed_rate);
  const int band = ClaimBand(offered);
  for (Counts* counts : {&global_[proposer], &NamespaceCounts(seq.request.speculation.ns)[proposer]}) {
    Claim& c = counts->claims[band];
    c.claimed += claimed;
    c.accepted += accepted;
    if (c.claimed > kWindow) {
      c.claimed /= 2;
      c.accepted /= 2;
    }
  }
}

}  // namespace floe
