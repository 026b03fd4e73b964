#include "services/worker/engine/draft_planner.h"

#include <algorithm>

namespace floe {

DraftPlanner::DraftPlanner(const EngineOptions& options, std::vector<std::unique_ptr<Proposer>> proposers,
                           int32_t vocab_size, bool tree_verify)
    : options_(options),
      proposers_(std::move(proposers)),
      vocab_size_(vocab_size),
      tree_verify_(tree_verify),
      stats_(proposers_.size(), DraftAcceptanceStats(options.num_speculative_tokens)) {
  for (const auto& proposer : proposers_) wants_last_hidden_ = wants_last_hidden_ || proposer->wants_last_hidden();
  proposals_.resize(proposers_.size());
  if (options.draft_selection == EngineOptions::DraftSelection::kScore) {
    selector_ = std::make_unique<HighestScoreSelector>();
  } else {
    selector_ = std::make_unique<AcceptanceRateSelector>(static_cast<int>(proposers_.size()));
  }
}

void DraftPlanner::Plan(const std::vector<Sequence*>& running, const std::deque<Sequence*>& waiting,
                        int32_t max_model_len) {
  if (proposers_.empty() || options_.num_speculative_tokens <= 0) return;
  for (Sequence* seq : running) seq->draft.clear();  // a draft the budget left unplanned is stale now
  int64_t step_tokens = 0;
  for (const Sequence* seq : running) step_tokens += seq->pending();
  for (const Sequence* seq : waiting) step_tokens += seq->pending();
  step_tokens = std::min<int64_t>(step_tokens, options_.max_num_batched_tokens);
  spec_batch_.clear();
  spec_seqs_.clear();
  candidates_.clear();
  caps_.clear();
  int emitting = 0;
  for (Sequence* seq : running) {
    if (seq->pending() != 1) continue;
    ++emitting;
    if (seq->request.speculation.disable) continue;
    // Never draft past max_tokens (at most k+1 tokens come out of a step) or
    // past the context (the last draft's KV slot must be < max_model_len).
    int64_t max_draft = options_.num_speculative_tokens;
    max_draft = std::min<int64_t>(max_draft, seq->request.stop.max_tokens - seq->output_len() - 1);
    max_draft = std::min<int64_t>(max_draft, max_model_len - seq->total_len());
    if (max_draft <= 0) continue;
    candidates_.push_back(seq);
    caps_.push_back(static_cast<int>(max_draft));
  }
  for (DraftAcceptanceStats& stats : stats_) stats.Age(emitting);
  selector_->Age(emitting);
  const std::vector<int> lengths =
      PlanDraftLengths(step_tokens, emitting, caps_, stats_,
                       {options_.speculative_token_threshold, options_.speculative_step_overhead_tokens});
  for (size_t c = 0; c < candidates_.size(); ++c) {
    Sequence* seq = candidates_[c];
    if (lengths[c] <= 0) continue;
    SpecSequence s;
    s.request_id = seq->request.id;
    s.ns = seq->request.speculation.ns;
    s.tokens = seq->tokens;
    s.prompt_len = seq->prompt_len;
    s.max_draft = static_cast<int32_t>(lengths[c]);
    s.last_hidden = seq->last_hidden;
    spec_batch_.push_back(s);
    spec_seqs_.push_back(seq);
  }
  if (spec_batch_.empty()) return;
  // A sequence's share of the step's fixed cost, for the draft selector.
  const double overhead = options_.speculative_step_overhead_tokens < 0
                              ? -1.0
                              : options_.speculative_step_overhead_tokens / std::max(1, emitting);
  for (size_t p = 0; p < proposers_.size(); ++p) {
    proposals_[p].assign(spec_batch_.size(), DraftProposal{});
    if (proposers_.size() == 1 || !proposers_[p]->expensive()) {
      proposers_[p]->Propose(spec_batch_, proposals_[p]);
      continue;
    }
    // An expensive proposer drafts only for the sequences whose draft from
    // it the selector might verify.
    sub_batch_.clear();
    sub_index_.clear();
    for (size_t i = 0; i < spec_batch_.size(); ++i) {
      if (!selector_->MayChoose(*spec_seqs_[i], static_cast<int>(p), spec_batch_[i].max_draft, overhead)) continue;
      sub_batch_.push_back(spec_batch_[i]);
      sub_index_.push_back(i);
    }
    if (sub_batch_.empty()) continue;
    sub_out_.assign(sub_batch_.size(), DraftProposal{});
    proposers_[p]->Propose(sub_batch_, sub_out_);
    for (size_t j = 0; j < sub_index_.size(); ++j) proposals_[p][sub_index_[j]] = std::move(sub_out_[j]);
  }
  for (size_t i = 0; i < spec_seqs_.size(); ++i) {
    Sequence& seq = *spec_seqs_[i];
    choices_.clear();
    for (size_t p = 0; p < proposers_.size(); ++p) {
      const DraftProposal& d = proposals_[p][i];
      if (d.tokens.empty()) continue;
      choices_.push_back({static_cast<int>(p), &d,
                          static_cast<int>(std::min<size_t>(d.tokens.size(), spec_batch_[i].max_draft))});
    }
    if (choices_.empty()) continue;
    // Single-proposer methods keep the budget's decision (draft_budget.h).
    const int chosen = proposers_.size() == 1 ? 0 : selector_->Choose(seq, choices_, overhead);
    if (chosen < 0) continue;
    seq.draft_source = choices_[chosen].proposer;
    Assign(seq, *choices_[chosen].proposal, choices_[chosen].length);
  }
}

void DraftPlanner::Assign(Sequence& seq, const DraftProposal& proposal, int32_t max_draft) const {
  // A suffix cache may hold another model's ids: such a draft is dropped.
  for (int32_t t : proposal.tokens) {
    if (t < 0 || t >= vocab_size_) {
      seq.draft.clear();
      seq.draft_parents.clear();
      return;
    }
  }
  const size_t n = std::min<size_t>(proposal.tokens.size(), max_draft);
  seq.draft.assign(proposal.tokens.begin(), proposal.tokens.begin() + n);
  seq.draft_parents.clear();
  const std::vector<int32_t>& parents = proposal.parents;
  if (parents.empty()) return;
  bool chain = true;
  for (size_t i = 0; i < n; ++i) {
    // A malformed tree is a proposer bug: its draft is dropped, never run.
    if (parents.size() != proposal.tokens.size() || parents[i] < -1 || parents[i] >= static_cast<int32_t>(i)) {
      seq.draft.clear();
      return;
    }
    chain = chain && parents[i] == static_cast<int32_t>(i) - 1;
  }
  if (chain) return;  // verified as a causal chain, nothing to compact
  if (tree_verify_) {
    seq.draft_parents.assign(parents.begin(), parents.begin() + n);
    return;
  }
  // First root path: siblings come in the proposer's preference order.
  std::vector<int32_t> path;
  int32_t node = -1;
  for (size_t i = 0; i < n; ++i) {
    if (parents[i] != node) continue;
    path.push_back(seq.draft[i]);
    node = static_cast<int32_t>(i);
  }
  seq.draft = std::move(path);
}

void DraftPlanner::Finish(const Sequence& seq) {
  for (const auto& proposer : proposers_)
    proposer->Finish(seq.request.id, seq.request.speculation.ns, seq.tokens, seq.prompt_len);
}

}  // namespace floe
