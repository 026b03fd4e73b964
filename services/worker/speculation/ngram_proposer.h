// Prompt-lookup (n-gram) drafts, as vLLM's `ngram` speculator: for n from
// max_n down to min_n, find the earliest earlier occurrence of the sequence's
// last n tokens in prompt + output and propose the (up to) k tokens that
// followed it. Stateless apart from its options.
#pragma once

#include "services/worker/speculation/proposer.h"

namespace floe {

struct NgramOptions {
  int min_n = 1;
  int max_n = 4;
  int num_tokens = 4;  // k; also capped by SpecSequence::max_draft
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(NgramOptions options) : options_(options) {}
  std::string_view name() const override { return "ngram"; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override;

  // The draft for one token sequence (empty when no n-gram recurs).
  static std::vector<int32_t> Lookup(std::span<const int32_t> tokens, const NgramOptions& options, int max_tokens);

 private:
  NgramOptions options_;
};

}  // namespace floe
