// What the engine accepts and what it emits, free of gRPC and of devices.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/grammar/token_mask.h"
#include "services/worker/sampling/sampling_options.h"

namespace floe {

struct StopOptions {
  int32_t max_tokens = 0;  // > 0, validated by the engine against its limits
  int32_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
};

enum class FinishReason { kNone, kLength, kStop, kAbort, kContext };

struct TokenLogprobs {
  float logprob = 0.0f;
  int32_t rank = 0;  // prompt logprobs: 1 + the tokens more likely than this one (0: not computed)
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// One engine step's news for one request (several tokens when speculative
// drafts were accepted). Emitted on the engine thread; the
// sink must return quickly (queue and notify, never block on a client).
struct RequestOutput {
  std::vector<int32_t> new_tokens;
  std::vector<TokenLogprobs> logprobs;  // parallel to new_tokens when requested
  // EngineRequest::prompt_logprobs: on the first output with tokens, one
  // entry per prompt token after the first.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool has_prompt_logprobs = false;  // this output carries them (a 1-token prompt has none)
  FinishReason finish_reason = FinishReason::kNone;
  int32_t stop_token = -1;  // the stop/EOS id that ended the request, if any
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  // Why the engine itself ended the request (shutdown, backend failure,
  // duplicate id); OK for normal finishes and client aborts.
  absl::Status status;
  // When the engine emitted this output. A request's whole timeline is read
  // on this one clock: arrival (EngineRequest::arrival), first scheduled,
  // first token (the time of the first output with tokens), finished (the
  // time of the final output).
  std::chrono::steady_clock::time_point time;
  // Set on the final output: the arrival, the seconds spent waiting before
  // first scheduled, in prefill (first scheduled -> first token) and decoding
  // after it; they add up to time - arrival exactly.
  std::chrono::steady_clock::time_point arrival;
  double queue_time_s = 0.0;
  double prefill_time_s = 0.0;
  double decode_time_s = 0.0;

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

using OutputSink = std::function<void(const RequestOutput&)>;

// Speculative decoding per request (only used when the engine has proposers).
struct SpeculationRequest {
  bool disable = false;  // never draft for this request
  std::string ns;        // suffix-tree namespace; "" is the default one
};

struct EngineRequest {
  std::string id;  // unique among live requests
  // When the request reached the server (the start of its latency);
  // unset: when the engine queued it.
  std::chrono::steady_clock::time_point arrival;
  std::vector<int32_t> prompt;
  SamplingOptions sampling;
  bool seeded = false;  // false: the engine draws a seed
  StopOptions stop;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  // >= 0: each prompt token's logprob (after the first, from the raw
  // logits) with this many top alternatives, as vLLM's prompt_logprobs. The
  // prompt then runs whole, not from the prefix cache (cached blocks have
  // no logits), and every prompt row computes logits. Host sampling only.
  int32_t prompt_logprobs = -1;
  SpeculationRequest speculation;
  // Seeds the prefix-cache hash chain (a hash of the request's cache salt, 0
  // without one): requests only share cached blocks with the same salt.
  uint64_t cache_salt_hash = 0;
  // Structured outputs: what the output must be, compiled against the
  // worker's vocabulary (off the engine thread); null: unconstrained. Every
  // sampled token is masked to what it allows, EOS only where the output is
  // complete.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  OutputSink sink;
};

}  // namespace floe
