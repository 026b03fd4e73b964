// NgramProposer: the prompt-lookup baseline (vLLM's `ngram` method with
// prompt_lookup_min = prompt_lookup_max = n): find the earliest earlier
// occurrence of the context's last n tokens and propose the (up to) k tokens
// that followed it. Incremental: each appended token indexes one n-gram.
// One instance per request; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace floe::suffix_cache {

class NgramProposer {
 public:
  NgramProposer(int n, int k) : n_(n), k_(k) {}

  void Append(absl::Span<const int32_t> tokens);
  // Draft for the tokens appended so far (empty when there is no earlier
  // occurrence).
  std::vector<int32_t> Propose() const;

 private:
  uint64_t KeyAt(size_t start) const;

  int n_;
  int k_;
  std::vector<int32_t> tokens_;
  absl::flat_hash_map<uint64_t, int32_t> earliest_;  // n-gram hash -> start
};

}  // namespace floe::suffix_cache
