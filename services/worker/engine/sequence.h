// One request's state inside the engine, shared by its parts: the
// scheduler (which sequences run), the prefix chain (their KV blocks and
// prefix-cache hashes), draft planning and the engine's sampling.
//
// Owned by EngineCore; the others hold pointers for as long as it lives.
// Not thread-safe: the engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/grammar/matcher.h"
#include "services/worker/engine/request.h"

namespace floe {

struct Sequence {
  using Clock = std::chrono::steady_clock;

  EngineRequest request;
  std::vector<int32_t> tokens;  // prompt followed by output
  int32_t prompt_len = 0;
  std::vector<int32_t> block_table;
  int32_t num_computed = 0;  // leading tokens whose KV is in the cache
  int32_t cached_prompt_tokens = 0;
  bool admitted_once = false;
  int32_t registered_blocks = 0;  // leading full blocks registered in the prefix cache
  uint64_t last_block_hash = 0;   // the hash chain's value after them
  int64_t admission = 0;          // admission order, for choosing whom to preempt
  std::vector<int32_t> banned;    // EOS + stop ids, banned before min_tokens
  // This step's draft (decode phase only) and the proposer it came from;
  // verify = [last token, draft...] is what the step runs. A tree draft has
  // draft_parents (index of each token's parent in draft, -1: the last
  // token); empty for a chain. verify_parents indexes verify (chain or tree).
  std::vector<int32_t> draft;
  std::vector<int32_t> draft_parents;
  int draft_source = -1;
  // Leading draft tokens from draft_source; the rest (a chain's tail) are
  // tokens the grammar forces, drafted for free (grammar_drafts.h).
  int32_t draft_proposed = 0;
  // Where draft_source's score claimed a rate above the namespace's: the
  // tokens it offered and the per-token rate its score implied over them
  // (-1: no claim to judge), for the claim calibration. The claim is judged
  // over the tokens verified, after the scheduler's cuts.
  int32_t draft_offered = 0;
  double draft_claim_rate = -1;
  std::vector<int32_t> verify;
  std::vector<int32_t> verify_parents;
  // The backend's hidden state at the position that produced tokens.back(),
  // kept only when a proposer wants_last_hidden().
  std::vector<float> last_hidden;
  // Per proposer: this request's verified draft tokens accepted (successes)
  // and drafts cut short (failures), for the draft selector.
  struct Acceptance {
    int32_t successes = 0, failures = 0;
    int32_t asked = 0;  // steps since the record last halved
  };
  std::vector<Acceptance> proposer_acceptance;
  // Structured outputs: the grammar's state after the output so far (null:
  // unconstrained). Advanced by each emitted token; drafts are walked
  // through it and rolled back before verification.
  std::unique_ptr<grammar::GrammarMatcher> matcher;
  // Timeline for metrics (one clock, see RequestOutput::time).
  Clock::time_point arrival, first_scheduled, first_token;
  bool scheduled_once = false, has_first_token = false;

  // EngineRequest::prompt_logprobs: what the prompt rows gave so far (one
  // per prompt position after the first), until the first output carries
  // them; prompt_rows_step: this step computes logits for every row of a
  // prompt chunk.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  bool prompt_rows_step = false;
  bool wants_prompt_logprobs() const { return request.prompt_logprobs >= 0 && !prompt_logprobs_sent; }

  int32_t total_len() const { return static_cast<int32_t>(tokens.size()); }
  int32_t output_len() const { return total_len() - prompt_len; }
  // Tokens this sequence still has to run before it can emit (1 while decoding).
  int32_t pending() const { return total_len() - num_computed; }
};

}  // namespace floe
