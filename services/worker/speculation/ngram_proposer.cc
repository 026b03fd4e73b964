#include "services/worker/speculation/ngram_proposer.h"

#include <algorithm>

namespace floe {

std::vector<int32_t> NgramProposer::Lookup(std::span<const int32_t> tokens, const NgramOptions& options,
                                           int max_tokens) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  const int k = std::min(options.num_tokens, max_tokens);
  if (k <= 0) return {};
  for (int n = std::min<int64_t>(options.max_n, len - 1); n >= std::max(1, options.min_n); --n) {
    std::span<const int32_t> pattern = tokens.subspan(len - n, n);
    // Earliest start whose n-gram equals the tail, excluding the tail itself.
    for (int64_t start = 0; start + n < len; ++start) {
      if (!std::equal(pattern.begin(), pattern.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(k, len - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + count);
    }
  }
  return {};
}

void NgramProposer::Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) {
  for (size_t i = 0; i < batch.size(); ++i) {
    out[i].tokens = Lookup(batch[i].tokens, options_, batch[i].max_draft);
    out[i].score = static_cast<float>(out[i].tokens.size());
  }
}

}  // namespace floe
