// What a request asks of the sampler, validated at the service boundary.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace floe {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1)
  uint64_t seed = 0;         // the engine draws one for unseeded requests
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // (token id, bias) added to the logits first (OpenAI's logit_bias).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Benchmarks only (forced decoding): output position i emits
  // forced_tokens[i] instead of a sampled token, so drafts are judged against
  // a recorded output. Past its end, tokens are sampled again.
  std::vector<int32_t> forced_tokens;

  bool greedy() const { return temperature == 0.0f; }
};

}  // namespace floe
