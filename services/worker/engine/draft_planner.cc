#include "services/worker/engine/draft_planner.h"

#include <algorithm>

#include "services/worker/engine/grammar_drafts.h"

namespace floe {
namespace {

// The per-token rate c of a chain of `length` tokens expected to accept
// `score` of them: sum_{j=1..length} c^j = score (bisection; monotone in c).
double ImpliedRate(double score, int length) {
  if (length <= 0 || !(score > 0)) return 0.0;
  if (score >= length) return 1.0;
  double lo = 0.0, hi = 1.0;
  for (int iter = 0; iter < 40; ++iter) {
    const double c = (lo + hi) / 2;
    double sum = 0, term = 1;
    for (int j = 0; j < length; ++j) sum += (term *= c);
    (sum < score ? lo : hi) = c;
  }
  return lo;
}

}  // namespace

DraftPlanner::DraftPlanner(const EngineOptions& options, std::vector<std::unique_ptr<Proposer>> proposers,
                           int32_t vocab_size, bool tree_verify)
    : options_(options),
      proposers_(std::move(proposers)),
      vocab_size_(vocab_size),
      tree_verify_(tree_verify),
      rates_(std::make_unique<AcceptanceRateSelector>(static_cast<int>(proposers_.size()))) {
  for (const auto& proposer : proposers_) wants_last_hidden_ = wants_last_hidden_ || proposer->wants_last_hidden();
  proposals_.resize(proposers_.size());
  if (options.draft_selection == EngineOptions::DraftSelection::kScore)
    selector_ = std::make_unique<HighestScoreSelector>();
  cost_.threshold = options.speculative_token_threshold;
  cost_.enabled = options.speculative_step_overhead_tokens >= 0;
  if (auto curve = StepCostCurve::FromPoints(options.speculative_step_cost_curve); curve.ok()) {
    cost_.curve = *std::move(curve);
    // A curve measured at creation times the forward alone; a file from
    // bench_verify_cost times whole engine steps already.
    add_step_overhead_ = options.measure_step_cost || options.step_cost_curve_forward_only;
  } else {
    cost_.curve = StepCostCurve::Linear(options.speculative_step_overhead_tokens);
  }
}

void DraftPlanner::Plan(const std::vector<Sequence*>& running, const std::deque<Sequence*>& waiting,
                        int32_t max_model_len) {
  if (proposers_.empty() || options_.num_speculative_tokens <= 0) return;
  for (Sequence* seq : running) {  // a draft the budget left unplanned is stale now
    seq->draft.clear();
    seq->draft_parents.clear();
    seq->draft_source = -1;
    seq->draft_proposed = 0;
    seq->draft_claim_rate = -1;
  }
  int64_t step_tokens = 0;
  for (const Sequence* seq : running) step_tokens += seq->pending();
  for (const Sequence* seq : waiting) step_tokens += seq->pending();
  step_tokens = std::min<int64_t>(step_tokens, options_.max_num_batched_tokens);
  spec_batch_.clear();
  spec_seqs_.clear();
  int emitting = 0;
  // Every candidate asks for its whole cap (an expensive proposer only where
  // the selector might take its draft, below); the plan then trims the
  // drafts as they came back. Asking is what lets a request whose rate
  // reads low (a namespace of chat) find a draft its proposer is sure of
  // (an agent re-asking a question the suffix tree has the answer to).
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
    SpecSequence s;
    s.request_id = seq->request.id;
    s.ns = seq->request.speculation.ns;
    s.tokens = seq->tokens;
    s.prompt_len = seq->prompt_len;
    s.max_draft = static_cast<int32_t>(max_draft);
    s.last_hidden = seq->last_hidden;
    spec_batch_.push_back(s);
    spec_seqs_.push_back(seq);
  }
  rates_->Age(emitting);
  if (selector_) selector_->Age(emitting);
  if (step_tokens >= options_.speculative_token_threshold) {  // no room for a draft token
    spec_batch_.clear();
    spec_seqs_.clear();
    return;
  }
  if (spec_batch_.empty()) return;
  // A sequence's share of the step's fixed cost in token rows (the curve's
  // local line through the plain step), for the draft selector.
  double overhead = -1.0;
  if (cost_.enabled) {
    const int64_t n = std::max<int64_t>(1, step_tokens);
    const double t = cost_.Time(n), dt = cost_.Time(n + 1) - t;
    const double fixed = dt > 0 ? t / dt - static_cast<double>(n) : 1e6;
    overhead = std::clamp(fixed, 0.0, 1e6) / std::max(1, emitting);
  }
  for (size_t p = 0; p < proposers_.size(); ++p) {
    proposals_[p].assign(spec_batch_.size(), DraftProposal{});
    if (proposers_.size() == 1 || !proposers_[p]->expensive()) {
      for (Sequence* seq : spec_seqs_) rates_->AgeRequest(*seq, static_cast<int>(p));
      proposers_[p]->Propose(spec_batch_, proposals_[p]);
      continue;
    }
    // An expensive proposer drafts only for the sequences whose draft from
    // it the selector might verify.
    sub_batch_.clear();
    sub_index_.clear();
    for (size_t i = 0; i < spec_batch_.size(); ++i) {
      if (!rates_->MayChoose(*spec_seqs_[i], static_cast<int>(p), spec_batch_[i].max_draft, overhead)) continue;
      sub_batch_.push_back(spec_batch_[i]);
      sub_index_.push_back(i);
    }
    if (sub_batch_.empty()) continue;
    sub_out_.assign(sub_batch_.size(), DraftProposal{});
    proposers_[p]->Propose(sub_batch_, sub_out_);
    for (size_t j = 0; j < sub_index_.size(); ++j) proposals_[p][sub_index_[j]] = std::move(sub_out_[j]);
  }
  // Each sequence's draft (one proposer's), then the final plan over the
  // drafts as they are.
  choice_sets_.resize(spec_seqs_.size());
  chosen_.assign(spec_seqs_.size(), -1);
  chosen_caps_.assign(spec_seqs_.size(), 0);
  chosen_rates_.assign(spec_seqs_.size(), 0.0);
  claim_rates_.assign(spec_seqs_.size(), -1.0);
  offered_.assign(spec_seqs_.size(), 0);
  for (size_t i = 0; i < spec_seqs_.size(); ++i) {
    Sequence& seq = *spec_seqs_[i];
    std::vector<DraftCandidate>& choices = choice_sets_[i];
    choices.clear();
    for (size_t p = 0; p < proposers_.size(); ++p) {
      const DraftProposal& d = proposals_[p][i];
      if (d.tokens.empty()) continue;
      choices.push_back({static_cast<int>(p), &d,
                         static_cast<int>(std::min<size_t>(d.tokens.size(), spec_batch_[i].max_draft))});
    }
    if (choices.empty()) continue;
    // Single-proposer methods leave the length to the budget.
    const int chosen = proposers_.size() == 1 ? 0 : selector().Choose(seq, choices, overhead);
    if (chosen < 0) continue;
    chosen_[i] = chosen;
    const DraftCandidate& choice = choices[chosen];
    chosen_caps_[i] = choice.length;
    // The prior of this draft: the namespace's rate, or, where the proposer
    // scores its draft as expected accepted tokens and is surer than that,
    // the rate its score implies (an agent re-asking what the suffix tree
    // has seen, in a namespace whose other requests drafted badly). The
    // request's own counts outweigh either as they grow.
    chosen_rates_[i] = rates_->Rate(seq, choice.proposer);
    if (proposers_[choice.proposer]->scores_expected_accepted()) {
      const double namespace_prior = rates_->Rate(seq, choice.proposer, /*own=*/false);
      // The score is the whole draft's (the selector may have cut it),
      // discounted by how this namespace's claims of that length came out.
      const int offered = static_cast<int>(std::min<size_t>(choice.proposal->tokens.size(), spec_batch_[i].max_draft));
      const double claimed_rate = ImpliedRate(choice.proposal->score, offered);
      const double calibration = rates_->ClaimCalibration(seq, choice.proposer, offered);
      const double implied = ImpliedRate(choice.proposal->score * calibration, offered);
      if (implied > namespace_prior) chosen_rates_[i] = rates_->RateWithPrior(seq, choice.proposer, implied);
      // Only claims that would outrank the namespace's rate are judged: low
      // scores that over-deliver must not excuse high ones that fail. The
      // raw claim decides, so a discounted band is still judged whenever
      // its drafts are verified.
      if (claimed_rate > namespace_prior) {
        claim_rates_[i] = claimed_rate;
        offered_[i] = offered;
      }
    }
  }
  const std::vector<int> lengths = PlanDraftLengths(step_tokens, emitting, chosen_caps_, chosen_rates_, cost_);
  for (size_t i = 0; i < spec_seqs_.size(); ++i) {
    if (chosen_[i] < 0 || lengths[i] <= 0) continue;
    Sequence& seq = *spec_seqs_[i];
    const DraftCandidate& choice = choice_sets_[i][chosen_[i]];
    seq.draft_source = choice.proposer;
    Assign(seq, *choice.proposal, lengths[i]);
    seq.draft_proposed = static_cast<int32_t>(seq.draft.size());
    if (claim_rates_[i] >= 0 && !seq.draft.empty()) {
      seq.draft_claim_rate = claim_rates_[i];
      seq.draft_offered = offered_[i];
    }
  }
  // Structured outputs: every draft of a constrained sequence is cut to
  // what its grammar allows, and what the grammar forces is drafted for
  // free, the budget or a proposer's silence notwithstanding (up to the
  // sequence's cap: they cost verification rows, not a proposer's call).
  for (size_t i = 0; options_.grammar_drafts && i < spec_seqs_.size(); ++i) {
    Sequence& seq = *spec_seqs_[i];
    if (!seq.matcher) continue;
    const GrammarDraftResult r = ConstrainDraft(seq, spec_batch_[i].max_draft);
    grammar_cut_tokens_ += r.cut;
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

void DraftPlanner::ObserveStep(double step_ms, double forward_ms) {
  if (!add_step_overhead_ || !(step_ms >= forward_ms) || !(forward_ms >= 0)) return;
  constexpr double kAlpha = 0.05;  // about the last 20 steps
  cost_.step_overhead = (1 - kAlpha) * cost_.step_overhead + kAlpha * std::min(step_ms - forward_ms, 1e4);
}

void DraftPlanner::Finish(const Sequence& seq) {
  for (const auto& proposer : proposers_)
    proposer->Finish(seq.request.id, seq.request.speculation.ns, seq.tokens, seq.prompt_len);
}

}  // namespace floe
