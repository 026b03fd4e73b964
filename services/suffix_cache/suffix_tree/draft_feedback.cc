#include "services/suffix_cache/suffix_tree/draft_feedback.h"

namespace floe::suffix_cache {

void DraftFeedback::Proposed(const Draft& draft) { last_draft_ = draft.token_ids; }

int64_t DraftFeedback::Observe(absl::Span<const int32_t> emitted) {
  size_t accepted = 0;
  while (accepted < last_draft_.size() && accepted < emitted.size() &&
         last_draft_[accepted] == emitted[accepted]) {
    ++accepted;
  }
  last_accepted_in_full_ = !last_draft_.empty() && emitted.size() > last_draft_.size() &&
                           accepted == last_draft_.size();
  if (!last_draft_.empty()) {
    accepted_ = accepted_ * kDecay + static_cast<double>(accepted);
    drafted_ = drafted_ * kDecay + static_cast<double>(last_draft_.size());
  }
  last_draft_.clear();
  return static_cast<int64_t>(accepted);
}

DraftParams DraftFeedback::Adjust(const DraftParams& params, bool local) const {
  DraftParams p = params;
  if (!local || !last_accepted_in_full_ || acceptance() < params.confident_min_acceptance) {
    p.confident_prob = 0.0f;
  }
  if (!local) p.confident_min_support = 0;
  return p;
}

}  // namespace floe::suffix_cache
