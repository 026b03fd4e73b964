// Which proposer's draft a sequence verifies this step when more than one
// proposer drafted for it (--speculative suffix+lstm): one small policy
// interface, so the rule is configurable and replaceable.
//
// Floe's default, AcceptanceRateSelector, picks the draft with the most
// expected emitted tokens per unit of verification cost, from acceptance
// measured per request and proposer (a namespace's, then all requests', as
// the prior for a request's first drafts). It uses no confidence threshold:
// a rule choosing between a suffix draft and a model draft by a confidence
// threshold is claimed by US patent 12,572,745 (docs/speculative-decoding.md).
// HighestScoreSelector keeps each proposer's own score (the earlier
// proposer on ties), which is what single-proposer methods use.
//
// Not thread-safe: the engine thread only.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "services/worker/engine/sequence.h"
#include "services/worker/speculation/proposer.h"

namespace floe {

struct DraftCandidate {
  int proposer = 0;                      // index into the engine's proposers
  const DraftProposal* proposal = nullptr;
  int length = 0;                        // tokens that would be verified (> 0)
};

class DraftSelector {
 public:
  virtual ~DraftSelector() = default;
  // An index into `candidates` (non-empty), or -1 to verify no draft. May
  // shorten a candidate's length (its draft is then cut to that).
  // `overhead_tokens`: this sequence's share of the step's fixed cost, in
  // token rows (< 0: the cost model is off).
  virtual int Choose(const Sequence& seq, std::span<DraftCandidate> candidates, double overhead_tokens) = 0;
  // False when Choose would decline any draft of at most `max_length` tokens
  // from `proposer` for this sequence: the engine then does not ask that
  // proposer (a model-based one costs a forward pass per step).
  virtual bool MayChoose(Sequence& seq, int proposer, int max_length, double overhead_tokens) {
    (void)seq, (void)proposer, (void)max_length, (void)overhead_tokens;
    return true;
  }
  // A verified draft of `drafted` tokens from `proposer`, `accepted` matched.
  virtual void Record(Sequence& seq, int proposer, int drafted, int accepted) {
    (void)seq, (void)proposer, (void)drafted, (void)accepted;
  }
  // A step emitted `emitted` tokens (drafted or not).
  virtual void Age(int64_t emitted) { (void)emitted; }
};

class HighestScoreSelector : public DraftSelector {
 public:
  int Choose(const Sequence& seq, std::span<DraftCandidate> candidates, double overhead_tokens) override;
};

// Acceptance as a chain: a draft token is accepted with probability a given
// its predecessors were, so a draft of L tokens emits 1 + a + ... + a^L
// tokens in expectation, at a verification cost of (overhead + 1 + L) token
// rows. Each candidate is cut to its best length, and the best candidate is
// verified unless no draft (1 token for overhead + 1 rows) is worth more;
// with the cost model off, the draft with the most expected emitted tokens,
// uncut. a is estimated per request and proposer as successes / (successes
// + failures) (a draft of L tokens with n accepted: n successes, one failure
// when n < L), shrunk towards a prior with `prior_weight` pseudo-
// observations: the request's namespace's rate, itself shrunk towards all
// requests', itself towards 1 (optimistic: a proposer is measured before it
// is judged). Counts halve when a window fills, and after kIdleTokens
// emitted tokens without a verified draft from that proposer, so a proposer
// judged on a bad patch is probed again.
class AcceptanceRateSelector : public DraftSelector {
 public:
  explicit AcceptanceRateSelector(int num_proposers, double prior_weight = 4.0, size_t max_namespaces = 4096);

  int Choose(const Sequence& seq, std::span<DraftCandidate> candidates, double overhead_tokens) override;
  // Also ages the request's own record of `proposer`: it halves every
  // kRequestWindow calls, so a proposer ruled out for a request (never asked,
  // so never measured again) drifts back to the prior and is tried again.
  bool MayChoose(Sequence& seq, int proposer, int max_length, double overhead_tokens) override;
  void Record(Sequence& seq, int proposer, int drafted, int accepted) override;
  void Age(int64_t emitted) override;
  // One step in which `seq` could draft from `proposer`: the request's own
  // record of it halves every kRequestWindow such steps (MayChoose does this
  // for the proposers it is asked about).
  void AgeRequest(Sequence& seq, int proposer);

  // The rate Choose uses for this sequence and proposer (own = false: the
  // prior alone, the request's namespace's rate).
  double Rate(const Sequence& seq, int proposer, bool own = true) const;
  // The same, with `prior` in place of the namespace's rate (the request's
  // own counts still outweigh it as they grow).
  double RateWithPrior(const Sequence& seq, int proposer, double prior) const;
  // Expected emitted tokens per verification cost (token rows) of a draft
  // of `length` tokens at per-token acceptance `rate`.
  static double Value(double rate, int length, double overhead_tokens);

  // A proposer that scores its draft as expected accepted tokens makes a
  // claim; suffix trees over-claim where a continuation was seen once after
  // a short match (chat), and are about right after long ones (an agent
  // copying). The factor (at most 1) its claims in this namespace earned:
  // accepted / claimed per band of offered length (1, 2-3, 4-7, 8+ tokens),
  // shrunk like the rates, with prior_weight_ pseudo-tokens: a namespace
  // towards all requests', all towards 1.
  double ClaimCalibration(const Sequence& seq, int proposer, int offered) const;
  // A verified draft of `drafted` tokens, cut from `offered` (as
  // proposed) whose score implied per-token rate `claimed_rate`, claimed
  // the sum of claimed_rate^j over j = 1..drafted accepted tokens (a tree
  // draft verified as its first path is judged as a chain of that many
  // tokens: approximate, and the factor never exceeds 1); `accepted` were.
  void RecordClaim(const Sequence& seq, int proposer, int offered, double claimed_rate, int drafted, int accepted);

 private:
  static constexpr int kClaimBands = 4;
  struct Claim {
    double claimed = 0, accepted = 0;
  };
  struct Counts {
    double successes = 0, failures = 0;
    std::array<Claim, kClaimBands> claims;
  };
  std::vector<Counts>& NamespaceCounts(const std::string& ns);
  double PriorRate(const std::string& ns, int proposer) const;
  void Add(std::vector<Counts>& counts, int proposer, int successes, int failures);

  int num_proposers_;
  double prior_weight_;
  size_t max_namespaces_;
  std::vector<Counts> global_;
  std::vector<int64_t> idle_tokens_;  // per proposer: emitted since its last verified draft
  absl::flat_hash_map<std::string, std::vector<Counts>> namespaces_;  // bounded by max_namespaces_
};

}  // namespace floe
