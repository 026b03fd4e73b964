// Sampling kernels of kernels/cuda/sampling.h: one block of 1024 threads per
// drawn row. Passes whose order does not matter (arg-max, sums, histograms)
// stride over the row, coalesced; the two whose order does (the running sum
// of an untruncated draw, the gather of the candidates) give each thread
// one contiguous chunk, so a scan over the threads visits the ids in order,
// as the CPU sampler's loops do. The sequential tail of a truncated draw (at
// most kMaxSampleCandidates candidates) runs on one thread in the CPU's
// order. Built without fast math: the draws compare floats as the CPU does.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "kernels/cuda/sampling.h"

namespace floe::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kFirstWindow = 256;  // the CPU sampler's first candidate window
constexpr int kWiden = -2;         // a tail's verdict: widen the window

// services/worker/sampling/counter_rng.h, bit for bit (integers only).
__device__ __forceinline__ float CounterUniformDevice(uint64_t seed, uint64_t position, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (position + 1) + 0xd1b54a32d192ed03ULL * stream;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// Orders as the floats do; -0 and +0 (equal floats) get one key.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t b = __float_as_uint(f + 0.0f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

template <class T>
__device__ T BlockSum(T v) {
  __shared__ T partial[kWarps];
  __shared__ T result;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += partial[w];
    result = sum;
  }
  __syncthreads();
  const T out = result;
  __syncthreads();
  return out;
}

// The sum of v over the threads before this one; *total over all.
template <class T>
__device__ T BlockExclusiveScan(T v, T* total) {
  __shared__ T warp_inclusive[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(kFull, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  if (lane == 31) warp_inclusive[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    T w = warp_inclusive[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const T up = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += up;
    }
    warp_inclusive[lane] = w;
  }
  __syncthreads();
  T exclusive = __shfl_up_sync(kFull, inclusive, 1);
  if (lane == 0) exclusive = T(0);
  if (warp > 0) exclusive += warp_inclusive[warp - 1];
  *total = warp_inclusive[kWarps - 1];
  __syncthreads();
  return exclusive;
}

// The largest value, the lowest id among equals, to every thread.
__device__ void BlockArgMax(float& value, int& id) {
  __shared__ float values[kWarps];
  __shared__ int ids[kWarps];
  auto reduce = [&] {
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(kFull, value, o);
      const int i = __shfl_xor_sync(kFull, id, o);
      if (v > value || (v == value && i < id)) {
        value = v;
        id = i;
      }
    }
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  reduce();
  if (lane == 0) {
    values[warp] = value;
    ids[warp] = id;
  }
  __syncthreads();
  if (warp == 0) {
    value = values[lane];
    id = ids[lane];
    reduce();
    if (lane == 0) {
      values[0] = value;
      ids[0] = id;
    }
  }
  __syncthreads();
  value = values[0];
  id = ids[0];
  __syncthreads();
}

// The row's `window` best entries (larger logit first, lower id among
// equals, as the CPU's partial sort), in keys/ids[0, window): a radix
// select of the window-th largest key, a gather in id order, a bitonic sort.
__device__ void SelectBest(const float* row, int vocab, int begin, int end, int window, uint32_t* keys,
                           int32_t* ids) {
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining;
  const int tid = threadIdx.x;
  uint32_t prefix = 0, mask = 0;
  int remaining = window;  // how many of the keys matching `prefix` are still wanted
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int i = tid; i < vocab; i += kThreads) {
      const uint32_t k = OrderKey(row[i]);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1);
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, d = 255;
      for (; d > 0; --d) {
        if (above + hist[d] >= remaining) break;
        above += hist[d];
      }
      s_prefix = prefix | (static_cast<uint32_t>(d) << shift);
      s_remaining = remaining - above;
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
    __syncthreads();
  }
  // `prefix` is the window-th largest key; `remaining` of its equals belong
  // in the window, the lowest ids first.
  int greater = 0, equal = 0;
  for (int i = begin; i < end; ++i) {
    const uint32_t k = OrderKey(row[i]);
    greater += k > prefix;
    equal += k == prefix;
  }
  int greater_total = 0, equal_total = 0;
  int g = BlockExclusiveScan(greater, &greater_total);
  int e = BlockExclusiveScan(equal, &equal_total);
  for (int i = begin; i < end; ++i) {
    const uint32_t k = OrderKey(row[i]);
    if (k > prefix) {
      keys[g] = k;
      ids[g++] = i;
    } else if (k == prefix) {
      if (e < remaining) {
        keys[greater_total + e] = k;
        ids[greater_total + e] = i;
      }
      ++e;
    }
  }
  int n = 1;
  while (n < window) n <<= 1;
  for (int i = window + tid; i < n; i += kThreads) {
    keys[i] = 0;
    ids[i] = INT_MAX;
  }
  __syncthreads();
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < n; i += kThreads) {
        const int l = i ^ j;
        if (l <= i) continue;
        const bool l_first = keys[l] > keys[i] || (keys[l] == keys[i] && ids[l] < ids[i]);
        const bool i_first = keys[i] > keys[l] || (keys[i] == keys[l] && ids[i] < ids[l]);
        if ((i & k) == 0 ? l_first : i_first) {
          const uint32_t tk = keys[i];
          keys[i] = keys[l];
          keys[l] = tk;
          const int32_t ti = ids[i];
          ids[i] = ids[l];
          ids[l] = ti;
        }
      }
      __syncthreads();
    }
  }
}

// The CPU sampler's truncating stages over the sorted window, in its order
// (one thread; probs holds the candidates' softmax probabilities): the
// token, kWiden, or -1 when the window cannot widen.
__device__ int TruncatedTail(const SampleParams& p, float u, int window, int vocab, const int32_t* ids,
                             double* probs) {
  double mass = 0.0;
  for (int i = 0; i < window; ++i) mass += probs[i];
  bool settled = p.top_k > 0 || mass >= p.top_p || window == vocab;
  if (p.top_k > 0) {
    double kept_total = 0.0;
    for (int i = 0; i < window; ++i) kept_total += probs[i];
    for (int i = 0; i < window; ++i) probs[i] /= kept_total;
  }
  int keep = window;
  if (p.top_p < 1.0f) {
    double cumulative = 0.0;
    for (int i = 0; i < window; ++i) {
      cumulative += probs[i];
      if (cumulative >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double threshold = p.min_p * probs[0];
    int i = 1;
    while (i < keep && probs[i] >= threshold) ++i;
    keep = i;
  }
  // Unsettled, the CPU widens its window; a cut inside this one stays
  // where it is in any wider one (the sorted prefix is the same).
  settled = settled || keep < window;
  if (!settled) return min(vocab, window * 8) <= kMaxSampleCandidates ? kWiden : -1;
  double total = 0.0;
  for (int i = 0; i < keep; ++i) total += probs[i];
  const double target = u * total;
  double cumulative = 0.0;
  for (int i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (cumulative > target) return ids[i];
  }
  return ids[keep - 1];
}

__global__ void __launch_bounds__(kThreads)
    SampleKernel(const float* __restrict__ logits, int64_t stride, int vocab, const SampleParams* __restrict__ params,
                 int32_t* __restrict__ tokens) {
  __shared__ uint32_t keys[kMaxSampleCandidates];
  __shared__ int32_t ids[kMaxSampleCandidates];
  __shared__ double probs[kMaxSampleCandidates];
  __shared__ int verdict;
  __shared__ int chosen;
  __shared__ int last_positive;
  const SampleParams p = params[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(p.row) * stride;
  const int tid = threadIdx.x;
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, tid * chunk), end = min(vocab, begin + chunk);

  // Greedy: the first maximum (std::max_element's; a thread's ids ascend).
  float best = -INFINITY;
  int best_id = INT_MAX;
  for (int i = tid; i < vocab; i += kThreads) {
    const float x = row[i];
    if (best_id == INT_MAX || x > best) {
      best = x;
      best_id = i;
    }
  }
  BlockArgMax(best, best_id);
  if (p.temperature == 0.0f) {
    if (tid == 0) tokens[blockIdx.x] = best_id;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  const float u = CounterUniformDevice(p.seed, p.position, 0);

  if (p.top_k <= 0 && p.top_p >= 1.0f && p.min_p <= 0.0f) {
    // Inverse CDF over the whole vocabulary in id order: the first id whose
    // running sum of exp((l - max) / T) passes u x total.
    double local = 0.0;
    for (int i = begin; i < end; ++i) local += static_cast<double>(expf((row[i] - best) * inv_t));
    double total = 0.0;
    const double before = BlockExclusiveScan(local, &total);
    const double target = u * total;
    if (tid == 0) {
      chosen = INT_MAX;
      last_positive = 0;
    }
    __syncthreads();
    double cumulative = before;
    int found = INT_MAX, last = -1;
    for (int i = begin; i < end; ++i) {
      const float w = expf((row[i] - best) * inv_t);
      if (w <= 0.0f) continue;
      cumulative += w;
      last = i;
      if (cumulative > target) {
        found = i;
        break;
      }
    }
    if (found != INT_MAX) atomicMin(&chosen, found);
    if (last >= 0) atomicMax(&last_positive, last);  // read only when nothing passed the target
    __syncthreads();
    if (tid == 0) tokens[blockIdx.x] = chosen != INT_MAX ? chosen : last_positive;
    return;
  }

  if (min(p.top_k, vocab) > kMaxSampleCandidates) {
    if (tid == 0) tokens[blockIdx.x] = -1;
    return;
  }
  // The softmax total over the whole vocabulary, as the CPU's full_total.
  double local = 0.0;
  for (int i = tid; i < vocab; i += kThreads) local += exp(static_cast<double>((row[i] - best) * inv_t));
  const double full_total = BlockSum(local);
  int window = p.top_k > 0 ? min(p.top_k, vocab) : min(kFirstWindow, vocab);
  for (;;) {
    SelectBest(row, vocab, begin, end, window, keys, ids);
    // The candidates' probabilities in parallel; the sums in order below.
    for (int i = tid; i < window; i += kThreads)
      probs[i] = exp(static_cast<double>((row[ids[i]] - best) * inv_t)) / full_total;
    __syncthreads();
    if (tid == 0) verdict = TruncatedTail(p, u, window, vocab, ids, probs);
    __syncthreads();
    const int v = verdict;
    __syncthreads();
    if (v != kWiden) {
      if (tid == 0) tokens[blockIdx.x] = v;
      return;
    }
    window = min(vocab, window * 8);
  }
}

__global__ void CounterUniformKernel(uint64_t seed, const uint64_t* positions, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = CounterUniformDevice(seed, positions[i], 0);
}

}  // namespace

int SampleRows(const float* logits, int64_t stride, int vocab, const SampleParams* params, int n, int32_t* tokens,
               void* stream) {
  if (n < 0 || vocab <= 0 || stride < vocab) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  if (!logits || !params || !tokens) return static_cast<int>(cudaErrorInvalidValue);
  SampleKernel<<<n, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(logits, stride, vocab, params, tokens);
  return static_cast<int>(cudaGetLastError());
}

int CounterUniforms(uint64_t seed, const uint64_t* positions, int n, float* out, void* stream) {
  if (n < 0 || (n > 0 && (!positions || !out))) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return 0;
  CounterUniformKernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(seed, positions, n, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace floe::cuda
