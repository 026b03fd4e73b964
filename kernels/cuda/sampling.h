// Token sampling on the device: the twin of services/worker/sampling's
// Sampler for the stages that need only the logits (greedy, temperature,
// top-k, top-p, min-p), drawing with the same counter-based random number
// (counter_rng.h: CounterUniform(seed, position)), so a seeded row draws the
// token the CPU sampler draws from the same logits.
//
// The same stages in the same order, with two differences of rounding:
// CUDA's exp and expf (within an ulp or two of the host's), and two
// reductions summed by chunks instead of one element at a time (the softmax
// total over the vocabulary; the running sum of an untruncated draw). A
// draw within rounding of a boundary between two tokens, or a top-p / min-p
// cut within rounding of a candidate, may differ; nothing else. Logits are
// assumed free of NaN (a NaN row's arg-max is not std::max_element's).
//
// Truncated rows work on the best candidates as the CPU does (top_k of
// them, else a window of 256, widened eight-fold while top-p and min-p cut
// nothing inside it: a cut inside a window stays where it is in any wider
// one, so this may stop before the CPU does, with the CPU's token); a row
// whose window would pass kMaxSampleCandidates is declined (token -1) for
// the host to sample.
//
// Launchers as model_kernels.h: raw device pointers, asynchronous on
// `stream`, 0 or a cudaError_t code; none allocates.
#pragma once

#include <cstdint>

namespace floe::cuda {

struct SampleParams {
  int32_t row = 0;           // the logits row to draw from
  float temperature = 0.0f;  // 0: greedy (arg-max, lowest id on ties)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t position = 0;
};

inline constexpr int kMaxSampleCandidates = 2048;

// tokens[i] = the token drawn for params[i] from logits + params[i].row * stride
// (vocab floats), or -1 (declined), i < n.
int SampleRows(const float* logits, int64_t stride, int vocab, const SampleParams* params, int n, int32_t* tokens,
               void* stream);

// out[i] = CounterUniform(seed, positions[i]) computed on the device (the
// RNG contract's check).
int CounterUniforms(uint64_t seed, const uint64_t* positions, int n, float* out, void* stream);

}  // namespace floe::cuda
