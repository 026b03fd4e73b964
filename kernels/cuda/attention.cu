// Paged attention and the KV cache's writes and copies
// (kernels/cuda/model_kernels.h).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/kv_access.cuh"
#include "kernels/cuda/model_kernels.h"

namespace floe::cuda {
namespace {

using internal::ForKvType;
using internal::Invalid;
using internal::Launched;
using internal::Narrow;
using internal::Offset;
using internal::ValidKv;
using internal::ValidStep;
using internal::Widen;

constexpr int kWarps = 4;        // per (row, head) block
constexpr int kMaxHeadDim = 256;  // 8 elements per lane
constexpr int kPerLane = kMaxHeadDim / 32;

template <class T>
__global__ void WriteKvKernel(PagedKv kv, StepLayout step, const float* __restrict__ k, const float* __restrict__ v,
                              int64_t stride) {
  const int row = blockIdx.x;
  const int pos = step.write_pos[row];
  const int32_t block = step.tables[step.table[row] + pos / kv.block_size];
  const int slot = pos % kv.block_size;
  const int width = kv.kv_heads * kv.head_dim;
  T* const kc = static_cast<T*>(kv.k);
  T* const vc = static_cast<T*>(kv.v);
  for (int e = threadIdx.x; e < width; e += blockDim.x) {
    const int64_t at = Offset(kv, block, e / kv.head_dim, slot) + e % kv.head_dim;
    kc[at] = Narrow<T>(k[row * stride + e], kv.k_scale);
    vc[at] = Narrow<T>(v[row * stride + e], kv.v_scale);
  }
}

// One block of kWarps warps per (row, q head, split). The split takes its
// share of the row's keys; warp w of it takes keys w, w + kWarps, ...; each
// keeps an online softmax (running max m, sum l, and the weighted sum of
// values, head_dim split over its lanes); the warps' states merge at the
// end. With one split the block writes the output; with several it writes
// its (max, sum, unnormalized values) for MergeSplitsKernel. `scale`
// includes k_scale; the values' sums are multiplied by v_scale once.
template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionKernel(const float* __restrict__ q, int64_t q_stride, StepLayout step, PagedKv kv, int group,
                    float scale, float* __restrict__ out, int64_t out_stride, float* __restrict__ part_values,
                    float* __restrict__ part_stats) {
  const int row = step.subset ? step.subset[blockIdx.x] : blockIdx.x;
  const int head = blockIdx.y, kv_head = head / group;
  const int split = blockIdx.z, splits = gridDim.z;
  const int hd = kv.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float qr[kPerLane], acc[kPerLane];
  const float* qh = q + row * q_stride + static_cast<int64_t>(head) * hd;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < hd ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  const int32_t* table = step.tables + step.table[row];
  const int context = step.context[row];
  const int path_begin = step.path_begin[row];
  const int total = context + (step.path_end[row] - path_begin);
  const int chunk = (total + splits - 1) / splits;
  const int first = split * chunk, last = min(total, first + chunk);
  float m = -INFINITY, l = 0.0f;
  for (int key = first + warp; key < last; key += kWarps) {
    const int pos = key < context ? key : step.paths[path_begin + key - context];
    const int64_t at = Offset(kv, table[pos / kv.block_size], kv_head, pos % kv.block_size);
    const T* kp = static_cast<const T*>(kv.k) + at;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) s += qr[j] * Widen(kp[d]);
    }
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    s *= scale;
    const float next = fmaxf(m, s);
    const float correction = expf(m - next);  // 0 while m is -inf
    const float p = expf(s - next);
    l = l * correction + p;
    const T* vp = static_cast<const T*>(kv.v) + at;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * correction + (d < hd ? p * Widen(vp[d]) : 0.0f);
    }
    m = next;
  }
  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kMaxHeadDim];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) warp_acc[warp][d] = acc[j];
  }
  __syncthreads();
  float top = -INFINITY;
  for (int w = 0; w < kWarps; ++w) top = fmaxf(top, warp_m[w]);
  float sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) sum += warp_m[w] == -INFINITY ? 0.0f : warp_l[w] * expf(warp_m[w] - top);
  if (splits == 1) {
    float* o = out + row * out_stride + static_cast<int64_t>(head) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float value = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        if (warp_m[w] != -INFINITY) value += warp_acc[w][d] * expf(warp_m[w] - top);
      }
      o[d] = sum > 0.0f ? value * kv.v_scale / sum : 0.0f;
    }
    return;
  }
  const int64_t part = (static_cast<int64_t>(blockIdx.x) * gridDim.y + head) * splits + split;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float value = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (warp_m[w] != -INFINITY) value += warp_acc[w][d] * expf(warp_m[w] - top);
    }
    part_values[part * hd + d] = value * kv.v_scale;
  }
  if (threadIdx.x == 0) {
    part_stats[2 * part] = top;  // -inf: the split had no key
    part_stats[2 * part + 1] = sum;
  }
}

// One block per (row, head): the splits' softmax states into the output.
__global__ void MergeSplitsKernel(const float* __restrict__ part_values, const float* __restrict__ part_stats,
                                  int splits, int hd, const int32_t* __restrict__ subset, float* __restrict__ out,
                                  int64_t out_stride) {
  const int row = subset ? subset[blockIdx.x] : blockIdx.x, head = blockIdx.y;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * gridDim.y + head) * splits;
  float top = -INFINITY;
  for (int s = 0; s < splits; ++s) top = fmaxf(top, part_stats[2 * (first + s)]);
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float m = part_stats[2 * (first + s)];
    if (m != -INFINITY) sum += part_stats[2 * (first + s) + 1] * expf(m - top);
  }
  float* o = out + row * out_stride + static_cast<int64_t>(head) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float value = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float m = part_stats[2 * (first + s)];
      if (m != -INFINITY) value += part_values[(first + s) * hd + d] * expf(m - top);
    }
    o[d] = sum > 0.0f ? value / sum : 0.0f;
  }
}

// One block of 4 warps per (tile, q head). Thread t serves the tile's row
// t / 4 with its quad (t % 4 = ql): the quad splits head_dim (dims ql,
// ql + 4, ...), so a row's dot product is one quad reduction and the four
// reads of a key row from shared memory are consecutive words. Per key
// tile: K and V into shared memory, the row's 32 scores, one rescale of the
// running sum and values (online softmax), then the values.
// Narrow caches are widened once, into shared memory (V times v_scale;
// `scale` includes k_scale).
constexpr int kTileKeys = 32;
constexpr int kQuadDims = kMaxPrefillHeadDim / 4;

template <class T>
__global__ void __launch_bounds__(4 * kPrefillTileRows)
    PrefillAttentionKernel(const float* __restrict__ q, int64_t q_stride, StepLayout step, PagedKv kv, int group,
                           float scale, float* __restrict__ out, int64_t out_stride, const int32_t* __restrict__ tiles) {
  __shared__ float ks[kTileKeys][kMaxPrefillHeadDim];
  __shared__ float vs[kTileKeys][kMaxPrefillHeadDim];
  const int first = tiles[2 * blockIdx.x], count = tiles[2 * blockIdx.x + 1];
  const int head = blockIdx.y, kv_head = head / group, hd = kv.head_dim;
  const int r = threadIdx.x / 4, ql = threadIdx.x % 4;
  const bool active = r < count;
  const int row = first + (active ? r : 0);
  const int context = active ? step.context[row] : 0;
  const int32_t* table = step.tables + step.table[first];
  // The tile's keys: up to its rows' largest context.
  int keys = 0;
  for (int i = 0; i < count; ++i) keys = max(keys, step.context[first + i]);
  float qr[kQuadDims], acc[kQuadDims];
  const float* qh = q + row * q_stride + static_cast<int64_t>(head) * hd;
#pragma unroll
  for (int j = 0; j < kQuadDims; ++j) {
    const int d = ql + 4 * j;
    qr[j] = active && d < hd ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int k0 = 0; k0 < keys; k0 += kTileKeys) {
    __syncthreads();  // every thread is done with the last tile's keys
    for (int e = threadIdx.x; e < kTileKeys * hd; e += blockDim.x) {
      const int c = e / hd, d = e % hd, pos = k0 + c;
      if (pos < keys) {
        const int64_t at = Offset(kv, table[pos / kv.block_size], kv_head, pos % kv.block_size) + d;
        ks[c][d] = Widen(static_cast<const T*>(kv.k)[at]);
        vs[c][d] = Widen(static_cast<const T*>(kv.v)[at]) * kv.v_scale;
      } else {  // past the keys: masked, but 0 x (stale NaN or inf) would still poison the sums
        ks[c][d] = 0.0f;
        vs[c][d] = 0.0f;
      }
    }
    __syncthreads();
    float s[kTileKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kTileKeys; ++c) {
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kQuadDims; ++j) {
        const int d = ql + 4 * j;
        if (d < hd) dot += qr[j] * ks[c][d];
      }
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      dot += __shfl_xor_sync(0xffffffffu, dot, 2);
      s[c] = k0 + c < context ? dot * scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[c]);
    }
    if (tile_max == -INFINITY) continue;  // none of this tile's keys is the row's
    const float next = fmaxf(m, tile_max);
    const float correction = expf(m - next);  // 0 while m is -inf
    l *= correction;
#pragma unroll
    for (int j = 0; j < kQuadDims; ++j) acc[j] *= correction;
#pragma unroll
    for (int c = 0; c < kTileKeys; ++c) {
      const float p = expf(s[c] - next);  // 0 for a masked key
      l += p;
#pragma unroll
      for (int j = 0; j < kQuadDims; ++j) {
        const int d = ql + 4 * j;
        if (d < hd) acc[j] += p * vs[c][d];
      }
    }
    m = next;
  }
  if (!active) return;
  float* o = out + row * out_stride + static_cast<int64_t>(head) * hd;
#pragma unroll
  for (int j = 0; j < kQuadDims; ++j) {
    const int d = ql + 4 * j;
    if (d < hd) o[d] = l > 0.0f ? acc[j] / l : 0.0f;
  }
}

// Block b copies in array b (a layer's K or V), entries in order: a later
// entry may read what an earlier one wrote.
template <class T>
__global__ void CopyKvKernel(T* cache, int64_t array_elements, int block_size, int kv_heads, int head_dim,
                             const int32_t* __restrict__ copies, int num_copies) {
  T* array = cache + blockIdx.x * array_elements;
  const int width = kv_heads * head_dim;
  for (int c = 0; c < num_copies; ++c) {
    const int32_t* e = copies + 4 * c;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
      const int h = i / head_dim, d = i % head_dim;
      const int64_t src = ((static_cast<int64_t>(e[0]) * kv_heads + h) * block_size + e[1]) * head_dim + d;
      const int64_t dst = ((static_cast<int64_t>(e[2]) * kv_heads + h) * block_size + e[3]) * head_dim + d;
      array[dst] = array[src];
    }
    __syncthreads();
  }
}

}  // namespace

int WriteKv(const PagedKv& kv, const StepLayout& step, const float* k, const float* v, int64_t stride,
            void* stream) {
  if (!ValidKv(kv) || !ValidStep(step) || !k || !v || stride < kv.kv_heads * kv.head_dim) return Invalid();
  if (step.rows == 0) return 0;
  return ForKvType(kv.dtype, [&](auto t) {
    WriteKvKernel<decltype(t)><<<step.rows, 128, 0, static_cast<cudaStream_t>(stream)>>>(kv, step, k, v, stride);
    return Launched();
  });
}

int PagedAttention(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads,
                   float scale, float* out, int64_t out_stride, int splits, float* workspace,
                   int64_t workspace_floats, void* stream) {
  if (!ValidKv(kv) || !ValidStep(step) || !q || !out || num_heads <= 0 || num_heads % kv.kv_heads != 0 ||
      kv.head_dim > kMaxHeadDim || q_stride < num_heads * kv.head_dim || out_stride < num_heads * kv.head_dim ||
      splits < 1 || splits > kMaxSplits ||
      (step.subset && (step.subset_rows < 0 || step.subset_rows > step.rows))) {
    return Invalid();
  }
  const int rows = step.subset ? step.subset_rows : step.rows;
  if (splits > 1 && (!workspace || workspace_floats < PagedAttentionWorkspace(rows, num_heads, kv.head_dim, splits))) {
    return Invalid();
  }
  if (rows == 0) return 0;
  const int64_t parts = static_cast<int64_t>(rows) * num_heads * splits;
  float* part_values = splits > 1 ? workspace : nullptr;
  float* part_stats = splits > 1 ? workspace + parts * kv.head_dim : nullptr;
  const dim3 grid(rows, num_heads, splits);
  const int code = ForKvType(kv.dtype, [&](auto t) {
    AttentionKernel<decltype(t)><<<grid, kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
        q, q_stride, step, kv, num_heads / kv.kv_heads, scale * kv.k_scale, out, out_stride, part_values, part_stats);
    return Launched();
  });
  if (splits == 1 || code != 0) return code;
  MergeSplitsKernel<<<dim3(rows, num_heads), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      part_values, part_stats, splits, kv.head_dim, step.subset, out, out_stride);
  return Launched();
}

int PrefillAttention(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads,
                     float scale, float* out, int64_t out_stride, const int32_t* tiles, int num_tiles, void* stream) {
  if (!ValidKv(kv) || !ValidStep(step) || !q || !out || num_heads <= 0 || num_heads % kv.kv_heads != 0 ||
      kv.head_dim > kMaxPrefillHeadDim || q_stride < num_heads * kv.head_dim ||
      out_stride < num_heads * kv.head_dim || num_tiles < 0 || (num_tiles > 0 && !tiles)) {
    return Invalid();
  }
  if (num_tiles == 0) return 0;
  return ForKvType(kv.dtype, [&](auto t) {
    PrefillAttentionKernel<decltype(t)>
        <<<dim3(num_tiles, num_heads), 4 * kPrefillTileRows, 0, static_cast<cudaStream_t>(stream)>>>(
            q, q_stride, step, kv, num_heads / kv.kv_heads, scale * kv.k_scale, out, out_stride, tiles);
    return Launched();
  });
}

int64_t PagedAttentionWorkspace(int rows, int num_heads, int head_dim, int splits) {
  return static_cast<int64_t>(rows) * num_heads * splits * (head_dim + 2);
}

int CopyKvSlots(void* cache, KvDtype dtype, int64_t array_elements, int arrays, int block_size, int kv_heads,
                int head_dim, const int32_t* copies, int num_copies, void* stream) {
  if (!cache || array_elements <= 0 || arrays <= 0 || block_size <= 0 || kv_heads <= 0 || head_dim <= 0 ||
      num_copies < 0 || (num_copies > 0 && !copies)) {
    return Invalid();
  }
  if (num_copies == 0) return 0;
  return ForKvType(dtype, [&](auto t) {
    using T = decltype(t);
    CopyKvKernel<T><<<arrays, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(cache), array_elements, block_size, kv_heads, head_dim, copies, num_copies);
    return Launched();
  });
}

}  // namespace floe::cuda
