#include "services/suffix_cache/replay/ngram.h"

#include <algorithm>

namespace floe::suffix_cache {

uint64_t NgramProposer::KeyAt(size_t start) const {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n_; ++i) {
    h = (h ^ static_cast<uint32_t>(tokens_[start + i])) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return h;
}

void NgramProposer::Append(absl::Span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    tokens_.push_back(t);
    if (static_cast<int>(tokens_.size()) >= n_) {
      const size_t start = tokens_.size() - n_;
      earliest_.try_emplace(KeyAt(start), static_cast<int32_t>(start));
    }
  }
}

std::vector<int32_t> NgramProposer::Propose() const {
  std::vector<int32_t> draft;
  if (static_cast<int>(tokens_.size()) <= n_) return draft;
  const size_t last = tokens_.size() - n_;
  auto it = earliest_.find(KeyAt(last));
  if (it == earliest_.end()) return draft;
  const size_t start = it->second;
  if (start >= last) return draft;
  // Guard against hash collisions.
  if (!std::equal(tokens_.begin() + start, tokens_.begin() + start + n_,
                  tokens_.begin() + last)) {
    return draft;
  }
  const size_t from = start + n_;
  const size_t to = std::min(tokens_.size(), from + k_);
  draft.assign(tokens_.begin() + from, tokens_.begin() + to);
  return draft;
}

}  // namespace floe::suffix_cache
