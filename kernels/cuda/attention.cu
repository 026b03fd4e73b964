// Paged attention and the KV cache's writes and copies
// (kernels/cuda/model_kernels.h).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/model_kernels.h"

namespace floe::cuda {
namespace {

constexpr int kWarps = 4;        // per (row, head) block
constexpr int kMaxHeadDim = 256;  // 8 elements per lane
constexpr int kPerLane = kMaxHeadDim / 32;

int Launched() { return static_cast<int>(cudaGetLastError()); }
int Invalid() { return static_cast<int>(cudaErrorInvalidValue); }

__device__ int64_t Offset(const PagedKv& kv, int32_t block, int head, int slot) {
  return ((static_cast<int64_t>(block) * kv.kv_heads + head) * kv.block_size + slot) * kv.head_dim;
}

__global__ void WriteKvKernel(PagedKv kv, StepLayout step, const float* __restrict__ k, const float* __restrict__ v,
                              int64_t stride) {
  const int row = blockIdx.x;
  const int pos = step.write_pos[row];
  const int32_t block = step.tables[step.table[row] + pos / kv.block_size];
  const int slot = pos % kv.block_size;
  const int width = kv.kv_heads * kv.head_dim;
  for (int e = threadIdx.x; e < width; e += blockDim.x) {
    const int64_t at = Offset(kv, block, e / kv.head_dim, slot) + e % kv.head_dim;
    kv.k[at] = k[row * stride + e];
    kv.v[at] = v[row * stride + e];
  }
}

// One block of kWarps warps per (row, q head). Warp w takes keys w, w +
// kWarps, ...; each keeps an online softmax (running max m, sum l, and the
// weighted sum of values, head_dim split over its lanes); the warps' states
// merge at the end.
__global__ void __launch_bounds__(kWarps * 32)
    AttentionKernel(const float* __restrict__ q, int64_t q_stride, StepLayout step, PagedKv kv, int group,
                    float scale, float* __restrict__ out, int64_t out_stride) {
  const int row = blockIdx.x, head = blockIdx.y, kv_head = head / group;
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
  float m = -INFINITY, l = 0.0f;
  for (int key = warp; key < total; key += kWarps) {
    const int pos = key < context ? key : step.paths[path_begin + key - context];
    const int64_t at = Offset(kv, table[pos / kv.block_size], kv_head, pos % kv.block_size);
    const float* kp = kv.k + at;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) s += qr[j] * kp[d];
    }
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    s *= scale;
    const float next = fmaxf(m, s);
    const float correction = expf(m - next);  // 0 while m is -inf
    const float p = expf(s - next);
    l = l * correction + p;
    const float* vp = kv.v + at;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * correction + (d < hd ? p * vp[d] : 0.0f);
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
  float* o = out + row * out_stride + static_cast<int64_t>(head) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float value = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (warp_m[w] != -INFINITY) value += warp_acc[w][d] * expf(warp_m[w] - top);
    }
    o[d] = sum > 0.0f ? value / sum : 0.0f;
  }
}

// Block b copies in array b (a layer's K or V), entries in order: a later
// entry may read what an earlier one wrote.
__global__ void CopyKvKernel(float* cache, int64_t array_floats, int block_size, int kv_heads, int head_dim,
                             const int32_t* __restrict__ copies, int num_copies) {
  float* array = cache + blockIdx.x * array_floats;
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

bool ValidKv(const PagedKv& kv) {
  return kv.k && kv.v && kv.block_size > 0 && kv.kv_heads > 0 && kv.head_dim > 0;
}
bool ValidStep(const StepLayout& s) {
  // paths may be null: a step without trees has none.
  return s.rows >= 0 && s.write_pos && s.table && s.context && s.path_begin && s.path_end && s.tables;
}

}  // namespace

int WriteKv(const PagedKv& kv, const StepLayout& step, const float* k, const float* v, int64_t stride,
            void* stream) {
  if (!ValidKv(kv) || !ValidStep(step) || !k || !v || stride < kv.kv_heads * kv.head_dim) return Invalid();
  if (step.rows == 0) return 0;
  WriteKvKernel<<<step.rows, 128, 0, static_cast<cudaStream_t>(stream)>>>(kv, step, k, v, stride);
  return Launched();
}

int PagedAttention(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads,
                   float scale, float* out, int64_t out_stride, void* stream) {
  if (!ValidKv(kv) || !ValidStep(step) || !q || !out || num_heads <= 0 || num_heads % kv.kv_heads != 0 ||
      kv.head_dim > kMaxHeadDim || q_stride < num_heads * kv.head_dim || out_stride < num_heads * kv.head_dim) {
    return Invalid();
  }
  if (step.rows == 0) return 0;
  const dim3 grid(step.rows, num_heads);
  AttentionKernel<<<grid, kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      q, q_stride, step, kv, num_heads / kv.kv_heads, scale, out, out_stride);
  return Launched();
}

int CopyKvSlots(float* cache, int64_t array_floats, int arrays, int block_size, int kv_heads, int head_dim,
                const int32_t* copies, int num_copies, void* stream) {
  if (!cache || array_floats <= 0 || arrays <= 0 || block_size <= 0 || kv_heads <= 0 || head_dim <= 0 ||
      num_copies < 0 || (num_copies > 0 && !copies)) {
    return Invalid();
  }
  if (num_copies == 0) return 0;
  CopyKvKernel<<<arrays, 256, 0, static_cast<cudaStream_t>(stream)>>>(cache, array_floats, block_size, kv_heads,
                                                                      head_dim, copies, num_copies);
  return Launched();
}

}  // namespace floe::cuda
