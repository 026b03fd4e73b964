// DraftFeedback: how one request's own drafts have fared so far, and the
// draft parameters that record calls for next.
//
// A tree's path probabilities are counts: a continuation seen once has
// probability 1.0. Whether drafting far along it pays depends on the request:
// an output that copies its prompt accepts nearly every such token, an output
// written anew (chat) few of them. The confident extension (drafting past the
// match-length budget, DraftParams::confident_prob) on dev-chat accepted 13%
// of its tokens (on dev-agentic 69%); most came from requests whose own
// acceptance rate was below 0.5. So the extension is kept for requests whose
// recent acceptance rate is at least DraftParams::confident_min_acceptance.
// "Recent": decayed sums, so a request that turns from copying to writing is
// followed within a few steps; a new request starts from an optimistic prior
// (copies start at the first output token).
//
// Not reference-compatible; with confident_prob 0 (reference-compatible mode)
// it changes nothing.
//
// Thread-safety: none; owned with its request.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"

namespace floe::suffix_cache {

class DraftFeedback {
 public:
  // The draft just proposed to the request (it replaces any earlier one
  // that was not yet observed).
  void Proposed(const Draft& draft);
  // The tokens the request emitted after that draft: scores it. Returns the
  // number of draft tokens accepted (their common prefix).
  int64_t Observe(absl::Span<const int32_t> emitted);

  // The previous draft was accepted in full and followed by a bonus token.
  bool last_accepted_in_full() const { return last_accepted_in_full_; }
  // Recent accepted / drafted tokens, the prior included.
  double acceptance() const { return accepted_ / drafted_; }

  // `params` as this request should use them for its next draft from the
  // tree that holds its own prompt (`local`) or from the global tree. The
  // confident extension only locally (it pays off for copies of the
  // request's own prompt; from other responses it mostly over-drafts), after
  // a draft accepted in full, while acceptance() >= confident_min_acceptance.
  // The supported extension (confident_min_support) also only locally: from
  // other responses, boilerplate that several of them share misleads
  // (dev-agentic budget 32: acceptance 0.868 with it from both trees, 0.911
  // from the local tree only).
  DraftParams Adjust(const DraftParams& params, bool local) const;

 private:
  // Weight of the prior (acceptance 1.0), in drafted tokens, and the decay
  // per observed draft: roughly the last 1 / (1 - kDecay) drafts count.
  static constexpr double kPriorTokens = 16.0;
  static constexpr double kDecay = 0.9;

  std::vector<int32_t> last_draft_;
  bool last_accepted_in_full_ = false;
  double accepted_ = kPriorTokens;
  double drafted_ = kPriorTokens;
};

}  // namespace floe::suffix_cache
