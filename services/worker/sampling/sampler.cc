#include "services/worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "services/worker/sampling/counter_rng.h"

namespace floe {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void ApplyPenalties(const SamplingOptions& options, const SamplingContext& context,
                    std::span<float> logits) {
  if (!Sampler::UsesPenalties(options)) return;
  const bool repetition = options.repetition_penalty != 1.0f && options.repetition_penalty > 0.0f;
  const bool additive = options.presence_penalty != 0.0f || options.frequency_penalty != 0.0f;
  const int64_t vocab = static_cast<int64_t>(logits.size());
  absl::flat_hash_map<int32_t, int32_t> output_counts;
  for (int32_t t : context.output_tokens) ++output_counts[t];
  if (repetition) {
    // As vLLM and HF: every token seen in prompt or output, once.
    absl::flat_hash_map<int32_t, bool> seen;
    for (auto tokens : {context.prompt_tokens, context.output_tokens}) {
      for (int32_t t : tokens) {
        if (t < 0 || t >= vocab || !seen.emplace(t, true).second) continue;
        float& l = logits[t];
        l = l > 0 ? l / options.repetition_penalty : l * options.repetition_penalty;
      }
    }
  }
  if (additive) {
    for (const auto& [t, count] : output_counts) {
      if (t < 0 || t >= vocab) continue;
      logits[t] -= options.frequency_penalty * static_cast<float>(count) + options.presence_penalty;
    }
  }
}

int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct Candidate {
  float logit;
  int32_t id;
};

bool Better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The `k` best candidates, sorted best first.
std::vector<Candidate> TopCandidates(std::span<const float> logits, size_t k) {
  std::vector<Candidate> all(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) all[i] = {logits[i], static_cast<int32_t>(i)};
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + k, all.end(), Better);
  all.resize(k);
  return all;
}

}  // namespace

int32_t Sampler::Sample(const SamplingOptions& options, const SamplingContext& context,
                        std::span<float> logits) {
  // The forced stage (benchmarks) overrides every other stage.
  if (context.output_position >= 0 && static_cast<size_t>(context.output_position) < options.forced_tokens.size())
    return options.forced_tokens[context.output_position];
  ApplyPenalties(options, context, logits);
  for (int32_t t : context.banned_tokens) {
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) logits[t] = kNegInf;
  }
  if (options.greedy()) return ArgMax(logits);

  const float inv_temperature = 1.0f / options.temperature;
  const bool truncate = options.top_k > 0 || options.top_p < 1.0f || options.min_p > 0.0f;
  const float u = CounterUniform(options.seed, static_cast<uint64_t>(context.output_position));

  if (!truncate) {
    // Inverse CDF over the whole vocabulary in id order: O(V), no sort.
    const float max_logit = logits[ArgMax(logits)];
    double total = 0.0;
    for (float& l : logits) {
      l = std::exp((l - max_logit) * inv_temperature);
      total += l;
    }
    double target = u * total, cumulative = 0.0;
    int32_t last_positive = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] <= 0.0f) continue;
      cumulative += logits[i];
      last_positive = static_cast<int32_t>(i);
      if (cumulative > target) return last_positive;
    }
    return last_positive;
  }

  // Truncating stages work on the best candidates only; widen the candidate set
  // until it is known to contain everything top-p could keep.
  size_t k = options.top_k > 0 ? static_cast<size_t>(options.top_k) : 256;
  std::vector<Candidate> candidates;
  std::vector<double> probs;
  for (;;) {
    candidates = TopCandidates(logits, k);
    const float best = candidates.front().logit;
    // Softmax mass of the candidates relative to the whole vocabulary.
    double full_total = 0.0;
    for (float l : logits) full_total += std::exp(static_cast<double>((l - best) * inv_temperature));
    probs.resize(candidates.size());
    double mass = 0.0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      probs[i] = std::exp(static_cast<double>((candidates[i].logit - best) * inv_temperature)) / full_total;
      mass += probs[i];
    }
    if (options.top_k > 0 || mass >= options.top_p || candidates.size() == logits.size()) break;
    k = std::min(logits.size(), k * 8);
  }
  // Renormalise over the top-k set (HF/vLLM order: top-k, then top-p, then
  // min-p). Without top-k the candidates are only a window on the full
  // distribution, whose probabilities are already normalised.
  double kept_total = options.top_k > 0 ? std::accumulate(probs.begin(), probs.end(), 0.0) : 1.0;
  for (double& p : probs) p /= kept_total;
  size_t keep = probs.size();
  if (options.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t i = 0; i < probs.size(); ++i) {
      cumulative += probs[i];
      if (cumulative >= options.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (options.min_p > 0.0f) {
    const double threshold = options.min_p * probs[0];
    size_t i = 1;
    while (i < keep && probs[i] >= threshold) ++i;
    keep = i;
  }
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += probs[i];
  double target = u * total, cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (cumulative > target) return candidates[i].id;
  }
  return candidates[keep - 1].id;
}

bool Sampler::UsesPenalties(const SamplingOptions& options) {
  return (options.repetition_penalty != 1.0f && options.repetition_penalty > 0.0f) ||
         options.presence_penalty != 0.0f || options.frequency_penalty != 0.0f;
}

TopLogprobs Sampler::ComputeLogprobs(std::span<const float> raw_logits, int32_t sampled, int top_n) {
  const float max_logit = raw_logits[ArgMax(raw_logits)];
  double total = 0.0;
  for (float l : raw_logits) total += std::exp(static_cast<double>(l - max_logit));
  const float log_total = static_cast<float>(std::log(total)) + max_logit;
  TopLogprobs out;
  out.sampled_logprob = raw_logits[sampled] - log_total;
  if (top_n > 0) {
    for (const Candidate& c : TopCandidates(raw_logits, static_cast<size_t>(top_n))) {
      out.ids.push_back(c.id);
      out.logprobs.push_back(c.logit - log_total);
    }
  }
  return out;
}

}  // namespace floe
