// Draft proposers for speculative decoding. The engine asks every installed
// proposer once per step for drafts of the batch's decoding sequences, keeps
// the best-scoring draft per sequence and verifies it in the same forward pass
// (EngineCore: lossless, the target's tokens are what plain decoding emits).
//
// Contract: Propose is called on the engine thread only, once per step, with
// the sequences that may draft this step (decode phase, speculation not
// disabled, a positive budget). A proposer may return fewer tokens than
// max_draft (or none); the engine truncates longer drafts. Finish is called
// once when a request leaves the engine (any reason), also for requests this
// proposer never saw; it must ignore unknown ids.
//
// Model-based speculators (e.g. an LSTM head over the target's last hidden
// state) implement this same interface: a proposer whose wants_last_hidden()
// is true finds in SpecSequence::last_hidden the target's final hidden state
// (after the last norm) at the position that produced the sequence's newest
// token, on backends that export it (Backend::LastHiddenStates; the CPU
// backend does). The engine copies it only when some proposer asks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace floe {

struct SpecSequence {
  std::string_view request_id;
  std::string_view ns;              // the request's speculation namespace ("" = default)
  std::span<const int32_t> tokens;  // prompt followed by the output so far
  int32_t prompt_len = 0;
  int32_t max_draft = 0;            // >= 1: at most this many draft tokens are verified
  // The target's hidden state that produced tokens.back() (hidden_size
  // floats); empty unless the proposer wants_last_hidden() and the backend
  // exports hidden states.
  std::span<const float> last_hidden;
};

struct DraftProposal {
  std::vector<int32_t> tokens;
  // Empty: a chain. Otherwise a tree: parents[i] < i is the index of token
  // i's parent, -1 for a child of the sequence's last token; siblings in
  // preference order (the engine verifies every node in one pass and accepts
  // the longest path the target agrees with). Truncating a tree to its first
  // n tokens keeps it a tree.
  std::vector<int32_t> parents;
  // Expected accepted tokens (or any comparable figure); the engine keeps the
  // highest-scoring non-empty draft, the earlier proposer on ties.
  float score = 0.0f;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Stable label for counters and metrics ("ngram", "suffix").
  virtual std::string_view name() const = 0;
  // True: SpecSequence::last_hidden is filled (a copy per emitting sequence per step).
  virtual bool wants_last_hidden() const { return false; }
  // True: drafting costs a model forward, so the engine asks this proposer
  // only for sequences whose draft it might verify (draft_selector.h).
  // Cheap proposers are asked for every drafting sequence, which also keeps
  // their per-request state (a suffix tree) current.
  virtual bool expensive() const { return false; }
  // True: DraftProposal::score is the draft's expected accepted tokens from
  // the proposer's own evidence (a suffix tree's path probabilities; with
  // Floe's drafting mode a sum of p^1.5, so an underestimate), so the draft
  // budget can judge a request's draft before the request has any measured
  // acceptance of its own (draft_planner.h).
  virtual bool scores_expected_accepted() const { return false; }
  // out.size() == batch.size(); out[i] arrives empty.
  virtual void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) = 0;
  // The request's final tokens (prompt + output).
  virtual void Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
                      int32_t prompt_len) {
    (void)request_id, (void)ns, (void)tokens, (void)prompt_len;
  }
};

}  // namespace floe
