// Draft planning for speculative decoding: before each step, which running
// sequences draft, how many tokens each may verify (draft_budget.h's cost
// model over the measured acceptance), and which proposer's draft each
// takes (draft_selector.h). Drafts are the one per-step input from outside the
// engine, so they are checked here: a draft with an id outside the
// vocabulary or a malformed tree is dropped, never run; a tree is cut to its
// first root path where the backend cannot compact a verified path. A
// constrained sequence's draft is cut to what its grammar allows and
// extended by what the grammar forces (grammar_drafts.h).
// Verification itself (the accept walk, KV compaction) is the engine's,
// since it samples exactly as plain decoding would.
//
// Not thread-safe: the engine thread only.
#pragma once

#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "services/worker/engine/draft_budget.h"
#include "services/worker/engine/draft_selector.h"
#include "services/worker/engine/engine_options.h"
#include "services/worker/engine/sequence.h"
#include "services/worker/speculation/proposer.h"

namespace floe {

class DraftPlanner {
 public:
  // `tree_verify`: the backend compacts verified tree paths (CopyKvSlots).
  // The step cost is options.speculative_step_cost_curve where set, else
  // the line speculative_step_overhead_tokens + N (< 0: no cost model).
  DraftPlanner(const EngineOptions& options, std::vector<std::unique_ptr<Proposer>> proposers, int32_t vocab_size,
               bool tree_verify);

  const std::vector<std::unique_ptr<Proposer>>& proposers() const { return proposers_; }
  bool wants_last_hidden() const { return wants_last_hidden_; }

  // Sets the draft (and draft_source) of every running sequence that decodes
  // this step and is granted draft tokens; clears everyone else's.
  // max_model_len bounds the last draft's KV slot.
  void Plan(const std::vector<Sequence*>& running, const std::deque<Sequence*>& waiting, int32_t max_model_len);
  // One verified draft of `drafted` tokens from seq.draft_source whose first
  // `accepted` matched.
  void RecordVerified(Sequence& seq, int drafted, int accepted) {
    rates_->Record(seq, seq.draft_source, drafted, accepted);
    if (seq.draft_claim_rate >= 0)
      rates_->RecordClaim(seq, seq.draft_source, seq.draft_offered, seq.draft_claim_rate, drafted, accepted);
    if (selector_) selector_->Record(seq, seq.draft_source, drafted, accepted);
  }
  // A step took `step_ms`, `forward_ms` of it in the backend's forward.
  // Where the curve was measured on the forward alone (at creation), the
  // rest (a moving average) is added to every step's cost as a fixed cost:
  // the larger it is, the cheaper a draft token is relative to the step.
  void ObserveStep(double step_ms, double forward_ms);
  // The request ended: proposers learn its tokens.
  void Finish(const Sequence& seq);
  // Structured outputs: proposers' draft tokens their grammar forbade, so far.
  int64_t grammar_cut_tokens() const { return grammar_cut_tokens_; }

 private:
  void Assign(Sequence& seq, const DraftProposal& proposal, int32_t max_draft) const;

  const EngineOptions& options_;
  std::vector<std::unique_ptr<Proposer>> proposers_;
  int32_t vocab_size_;
  bool tree_verify_;
  bool wants_last_hidden_ = false;
  DraftCostModel cost_;
  bool add_step_overhead_ = false;
  // Per-request acceptance (the draft budget's rates), and the selector
  // where it is another policy (null: rates_ selects too).
  std::unique_ptr<AcceptanceRateSelector> rates_;
  std::unique_ptr<DraftSelector> selector_;
  DraftSelector& selector() { return selector_ ? *selector_ : *rates_; }
  // Per-step scratch, capacity reused.
  std::vector<SpecSequence> spec_batch_;
  std::vector<Sequence*> spec_seqs_;
  std::vector<std::vector<DraftProposal>> proposals_;
  std::vector<int> chosen_caps_;
  std::vector<double> chosen_rates_;
  std::vector<double> claim_rates_;  // per spec_batch_ entry: the judged claim's rate, -1 none
  std::vector<int> offered_;
  std::vector<int> chosen_;  // per spec_batch_ entry: index into choices, -1 none
  std::vector<std::vector<DraftCandidate>> choice_sets_;
  std::vector<SpecSequence> sub_batch_;
  std::vector<size_t> sub_index_;
  std::vector<DraftProposal> sub_out_;
  int64_t grammar_cut_tokens_ = 0;
};

}  // namespace floe
