// The model-based proposer: an Arctic speculator (lstm_speculator.h) run once
// per step over every sequence that may draft and whose hidden state the
// backend exported, batched, after the target's forward. Its drafts are
// n_predict tokens at most, greedy, scored by the speculator's measured
// acceptance (the selection between proposers is the DraftPlanner's).
//
// Thread-safety: the engine thread only (Proposer's contract).
#pragma once

#include <memory>
#include <vector>

#include "services/worker/speculation/lstm_speculator.h"
#include "services/worker/speculation/proposer.h"

namespace floe {

class LstmProposer : public Proposer {
 public:
  explicit LstmProposer(std::unique_ptr<LstmSpeculator> speculator) : speculator_(std::move(speculator)) {}

  std::string_view name() const override { return "lstm"; }
  bool wants_last_hidden() const override { return true; }
  bool expensive() const override { return true; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override;

  const LstmSpeculator& speculator() const { return *speculator_; }

 private:
  std::unique_ptr<LstmSpeculator> speculator_;
  // Per-step scratch.
  std::vector<float> hidden_;
  std::vector<int32_t> tokens_, drafts_;
  std::vector<size_t> rows_;
};

}  // namespace floe
