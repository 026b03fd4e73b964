#include "services/worker/speculation/lstm_proposer.h"

#include <algorithm>

namespace floe {

void LstmProposer::Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) {
  const SpeculatorConfig& config = speculator_->config();
  const size_t hidden_size = static_cast<size_t>(config.input_hidden_dim);
  hidden_.clear();
  tokens_.clear();
  rows_.clear();
  int steps = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SpecSequence& s = batch[i];
    // No hidden state (a backend that exports none, or the first step after
    // a prefix hit that computed nothing): nothing to draft from.
    if (s.last_hidden.size() != hidden_size || s.tokens.empty() || s.max_draft < 1) continue;
    rows_.push_back(i);
    hidden_.insert(hidden_.end(), s.last_hidden.begin(), s.last_hidden.end());
    tokens_.push_back(s.tokens.back());
    steps = std::max(steps, std::min<int>(s.max_draft, config.n_predict));
  }
  if (rows_.empty()) return;
  drafts_.assign(rows_.size() * steps, 0);
  speculator_->Draft(hidden_, tokens_, steps, drafts_);
  for (size_t r = 0; r < rows_.size(); ++r) {
    const SpecSequence& s = batch[rows_[r]];
    const int n = std::min<int>(s.max_draft, steps);
    DraftProposal& proposal = out[rows_[r]];
    proposal.tokens.assign(drafts_.begin() + r * steps, drafts_.begin() + r * steps + n);
    proposal.score = 0.0f;  // the planner's selection policy weighs proposers by measured acceptance
  }
}

}  // namespace floe
