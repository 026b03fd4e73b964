// How many draft tokens one engine step verifies, per sequence: a cost model
// of verification cost against the tokens drafts are expected to add.
//
// A step costs about (R + N) token-equivalents of compute, N being the tokens
// it runs and R its fixed cost (weights read once per step, in tokens' worth
// of compute; small on a compute-bound CPU, large on a memory-bound GPU). A
// draft token at position j is accepted with the (measured) probability P_j
// that the draft's first j+1 tokens all match. Adding it to a step that is
// expected to emit E tokens pays off when E/(R+N) < (E+P_j)/(R+N+1), i.e.
// P_j > E/(R+N). Draft tokens are granted position by position across the
// batch (position 0 of every sequence, then position 1, ...), P_j decreasing,
// until that fails or the step's token count reaches the hard threshold.
// So drafts shrink as the batch grows (E/(R+N) -> 1) and vanish where they
// are seldom accepted, and a loaded server never runs slower for them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace floe {

struct DraftCostModel {
  // Hard cap: a step verifies at most max(0, threshold - T) draft tokens, T
  // being its tokens without drafts.
  int threshold = 32;
  // R above; < 0 turns the cost model off (only the threshold applies).
  double step_overhead_tokens = 1.0;
};

// Per-position acceptance of past drafts (of one proposer), windowed:
// counts halve once position 0 has seen `window` drafts, so estimates follow
// the workload and positions left undrafted drift back to the optimistic prior.
// Counts also halve after `idle_tokens` emitted tokens without a draft: once
// position 0 is switched off nothing else would ever measure it again, and a
// workload that changes (chat, then agents) must get its drafts back. Each
// such probe costs a few draft tokens (one step's worth).
class DraftAcceptanceStats {
 public:
  explicit DraftAcceptanceStats(int max_positions, double window = 4096, int64_t idle_tokens = 65536);
  // One verified draft of `drafted` tokens of which the first `accepted` matched.
  void Record(int drafted, int accepted);
  // `emitted` tokens came out of a step (drafted or not).
  void Age(int64_t emitted);
  // P(the first position+1 draft tokens are all accepted); 1.0 while fewer
  // than kMinSamples drafts reached that position. Non-increasing in position.
  double Cumulative(int position) const;

  static constexpr double kMinSamples = 16;

 private:
  std::vector<double> drafted_;   // drafts with more than j tokens
  std::vector<double> accepted_;  // drafts whose token j was accepted
  double window_;
  int64_t idle_tokens_;
  int64_t tokens_since_draft_ = 0;
  void Halve();
};

// Draft lengths for the step's decoding sequences, parallel to `caps` (each
// sequence's own limit: k, max_tokens, context); `step_tokens` = T,
// `emitting` = sequences that emit a token this step without drafts.
std::vector<int> PlanDraftLengths(int64_t step_tokens, int emitting, std::span<const int> caps,
                                  const DraftAcceptanceStats& stats, const DraftCostModel& model);
// Several proposers, each with its own stats: a position's acceptance is the
// best proposer's (a sequence verifies one proposer's draft, and the draft
// selector picks the one that pays), so a proposer that is seldom right
// never switches off one that is.
std::vector<int> PlanDraftLengths(int64_t step_tokens, int emitting, std::span<const int> caps,
                                  std::span<const DraftAcceptanceStats> stats, const DraftCostModel& model);

}  // namespace floe
