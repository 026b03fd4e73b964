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

// Every token whose bit is clear gets -inf; whole words at a time where
// they are all set or all clear (a grammar's masks mostly are).
void ApplyAllowedTokens(std::span<const uint32_t> allowed, std::span<float> logits) {
  const size_t n = logits.size();
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = allowed[w];
    if (bits == ~uint32_t{0}) continue;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i) {
      if (!((bits >> (i & 31)) & 1)) logits[i] = kNegInf;
    }
  }
}

// The largest logit, in eight independent lanes (std::max_element is one
// compare-and-move chain: a 128k vocabulary's scan was most of a sampled
// token's cost). Logits are never NaN.
float MaxLogit(std::span<const float> logits) {
  constexpr size_t kLanes = 8;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kNegInf);
  const size_t n = logits.size(), body = n - n % kLanes;
  for (size_t i = 0; i < body; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] = logits[i + j] > lane[j] ? logits[i + j] : lane[j];
  }
  float best = kNegInf;
  for (size_t j = 0; j < kLanes; ++j) best = lane[j] > best ? lane[j] : best;
  for (size_t i = body; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  return best;
}

// The first id holding the largest logit (lowest id wins ties).
int32_t ArgMax(std::span<const float> logits) {
  const float best = MaxLogit(logits);
  return static_cast<int32_t>(std::find(logits.begin(), logits.end(), best) - logits.begin());
}

// The ids a mask allows, ascending, when they are at most 1/8 of `n` (the
// masks of a grammar's structural positions); false when denser.
bool SparseAllowed(std::span<const uint32_t> allowed, size_t n, std::vector<int32_t>& ids) {
  const size_t words = (n + 31) / 32;
  size_t count = 0;
  for (size_t w = 0; w < words; ++w) count += static_cast<size_t>(__builtin_popcount(allowed[w]));
  if (count * 8 > n) return false;
  ids.clear();
  ids.reserve(count);
  for (size_t w = 0; w < words; ++w) {
    for (uint32_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
      const size_t id = w * 32 + static_cast<size_t>(__builtin_ctz(bits));
      if (id < n) ids.push_back(static_cast<int32_t>(id));
    }
  }
  return true;
}

// Inverse CDF over `ids` (ascending) at temperature 1 / inv_temperature:
// exactly the whole-vocabulary walk below over a row whose other logits
// are -inf, whose terms are all exact zeros.
int32_t DrawAmong(std::span<const float> logits, const std::vector<int32_t>& ids, float max_logit,
                  float inv_temperature, float u) {
  double total = 0.0;
  for (int32_t id : ids) total += std::exp((logits[id] - max_logit) * inv_temperature);
  double target = u * total, cumulative = 0.0;
  int32_t last_positive = 0;
  for (int32_t id : ids) {
    const float p = std::exp((logits[id] - max_logit) * inv_temperature);
    if (p <= 0.0f) continue;
    cumulative += p;
    last_positive = id;
    if (cumulative > target) return last_positive;
  }
  return last_positive;
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
  for (const auto& [id, bias] : options.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] += bias;
  }
  ApplyPenalties(options, context, logits);
  for (int32_t t : context.banned_tokens) {
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) logits[t] = kNegInf;
  }
  const float inv_temperature = 1.0f / options.temperature;
  const bool truncate = options.top_k > 0 || options.top_p < 1.0f || options.min_p > 0.0f;
  float max_logit;
  if (!context.allowed_tokens.empty()) {
    // A sparse mask (a grammar's structural positions) is walked id by id,
    // never the whole row; a dense one (inside a string) sets -inf.
    thread_local std::vector<int32_t> ids;
    if (!truncate && SparseAllowed(context.allowed_tokens, logits.size(), ids)) {
      int32_t best = -1;
      for (int32_t id : ids) {
        if (best < 0 || logits[id] > logits[best]) best = id;
      }
      // Only a mask can leave nothing: model logits are finite.
      if (best < 0 || logits[best] == kNegInf) return kNoToken;
      if (options.greedy()) return best;
      return DrawAmong(logits, ids, logits[best], inv_temperature,
                       CounterUniform(options.seed, static_cast<uint64_t>(context.output_position)));
    }
    ApplyAllowedTokens(context.allowed_tokens, logits);
    const int32_t best = ArgMax(logits);
    if (logits[best] == kNegInf) return kNoToken;
    if (options.greedy()) return best;
    max_logit = logits[best];
  } else {
    if (options.greedy()) return ArgMax(logits);
    max_logit = MaxLogit(logits);
  }

  const float u = CounterUniform(options.seed, static_cast<uint64_t>(context.output_position));

  if (!truncate) {
    // Inverse CDF over the whole vocabulary in id order: O(V), no sort.
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
  // Rounding left the target unreached: the last candidate with any mass
  // (never a masked one).
  for (size_t i = keep; i-- > 1;) {
    if (probs[i] > 0) return candidates[i].id;
  }
  return candidates[0].id;
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
