// Turns one row of logits into one token: a chain of small stages
// (forced -> logit bias -> penalties -> allowed tokens -> banned tokens -> temperature ->
// top-k -> top-p -> min-p -> draw), each of which is skipped when its option
// is neutral. The forced stage (benchmarks only) emits
// SamplingOptions::forced_tokens. The allowed-tokens stage (structured
// outputs: the grammar's mask) sets every other logit to -inf, so every
// later stage, greedy included, chooses among the allowed tokens only.
// Greedy requests take the arg-max after penalties (lowest id wins ties).
//
// Stateless and thread-compatible: the engine thread calls it once per
// sequence per step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "services/worker/sampling/sampling_options.h"

namespace floe {

struct SamplingContext {
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;
  // Index in the output of the token being drawn: keys the counter RNG.
  int64_t output_position = 0;
  // Tokens that must not be drawn now (EOS and stop ids before min_tokens).
  std::span<const int32_t> banned_tokens;
  // Structured outputs: bit (id % 32) of word id / 32 set where token id may
  // be drawn; at least ceil(logits / 32) words. Empty: every token may.
  std::span<const uint32_t> allowed_tokens;
};

struct TopLogprobs {
  float sampled_logprob = 0.0f;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

class Sampler {
 public:
  // What Sample returns when allowed_tokens, less the banned tokens, leaves
  // nothing to draw (never without allowed_tokens).
  static constexpr int32_t kNoToken = -1;

  // `logits` is modified in place (scratch for the stages).
  static int32_t Sample(const SamplingOptions& options, const SamplingContext& context,
                        std::span<float> logits);

  // Whether the options penalise tokens by the request's history (the
  // stages a device sampler, which sees only logits, does not run).
  static bool UsesPenalties(const SamplingOptions& options);

  // Log-softmax of the raw model logits: the sampled token's logprob and the top_n best.
  static TopLogprobs ComputeLogprobs(std::span<const float> raw_logits, int32_t sampled, int top_n);
};

}  // namespace floe
