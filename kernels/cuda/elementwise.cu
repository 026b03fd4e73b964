// Row-wise kernels of kernels/cuda/model_kernels.h: one block per row (or
// per row and head), f32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/model_kernels.h"

namespace floe::cuda {
namespace {

constexpr int kThreads = 256;

int Launched() { return static_cast<int>(cudaGetLastError()); }
int Invalid() { return static_cast<int>(cudaErrorInvalidValue); }

// The sum of `v` over the block (blockDim.x a multiple of 32, at most 1024),
// returned to every thread.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) sum += warp_sums[w];
    total = sum;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // `total` and `warp_sums` may be reused by the caller's next BlockSum
  return result;
}

__global__ void EmbedKernel(const void* __restrict__ table, Dtype dtype, const int32_t* __restrict__ tokens,
                            int hidden, float* __restrict__ out) {
  const size_t src = static_cast<size_t>(tokens[blockIdx.x]) * hidden;
  float* row = out + static_cast<size_t>(blockIdx.x) * hidden;
  if (dtype == Dtype::kBf16) {
    const __nv_bfloat16* t = static_cast<const __nv_bfloat16*>(table) + src;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) row[i] = __bfloat162float(t[i]);
  } else {
    const float* t = static_cast<const float*>(table) + src;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) row[i] = t[i];
  }
}

__global__ void AddRmsNormKernel(float* __restrict__ x, const float* delta, const float* __restrict__ weight,
                                 float eps, int cols, float* out) {
  float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  const float* dr = delta + static_cast<size_t>(blockIdx.x) * cols;
  float* o = out + static_cast<size_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = xr[i] + dr[i];
    xr[i] = v;
    sum += v * v;
  }
  // Every thread reads back only the elements it wrote, so `out` may alias
  // `delta` without a barrier between the passes.
  const float inv = rsqrtf(BlockSum(sum) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) o[i] = weight[i] * (xr[i] * inv);
}

__global__ void GatherRmsNormKernel(const float* __restrict__ in, const int64_t* __restrict__ index,
                                    const float* __restrict__ weight, float eps, int cols, float* __restrict__ out) {
  const float* row = in + static_cast<size_t>(index[blockIdx.x]) * cols;
  float* o = out + static_cast<size_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) sum += row[i] * row[i];
  const float inv = rsqrtf(BlockSum(sum) / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) o[i] = weight[i] * (row[i] * inv);
}

// One group of every row: out[i] = silu(gate[i]) * up[i] at group * inter.
__global__ void SiluMulKernel(float* data, int width, int group, int inter) {
  float* row = data + static_cast<size_t>(blockIdx.x) * width;
  const float* gate = row + 2 * group * inter;
  const float* up = gate + inter;
  float* out = row + group * inter;
  for (int i = threadIdx.x; i < inter; i += blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// Block (row, group): as SiluMulKernel, from and to bf16.
__global__ void SiluMulBf16Kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t ld, int inter,
                                  __nv_bfloat16* __restrict__ out) {
  const int groups = gridDim.y, group = blockIdx.y;
  const __nv_bfloat16* gate = gate_up + blockIdx.x * ld + 2 * static_cast<int64_t>(group) * inter;
  const __nv_bfloat16* up = gate + inter;
  __nv_bfloat16* o = out + (static_cast<int64_t>(blockIdx.x) * groups + group) * inter;
  for (int i = threadIdx.x; i < inter; i += blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    o[i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * __bfloat162float(up[i]));
  }
}

__global__ void AddKernel(float* __restrict__ x, const float* __restrict__ delta, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] += delta[i];
  }
}

__global__ void ToBf16Kernel(const float* __restrict__ in, int64_t in_stride, int cols,
                             __nv_bfloat16* __restrict__ out) {
  const float* row = in + blockIdx.x * in_stride;
  __nv_bfloat16* o = out + static_cast<size_t>(blockIdx.x) * cols;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) o[i] = __float2bfloat16_rn(row[i]);
}

// RoPE of one head (rotate_half: pairs (i, i + half)) by one warp-strided
// loop; the pairs are disjoint, so no barrier is needed.
__device__ void RopeHead(float* head, int half, const float* cos, const float* sin, int lane, int lanes) {
  for (int i = lane; i < half; i += lanes) {
    const float a = head[i], b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

// One block per (row, head) of q | k: bias, per-head RMSNorm, RoPE. v heads
// get their bias only.
__global__ void PrepareQkKernel(float* qkv, int heads, int kv_heads, int head_dim, const float* bias,
                                const float* q_norm, const float* k_norm, float eps, const float* cos,
                                const float* sin) {
  const int width = (heads + 2 * kv_heads) * head_dim, half = head_dim / 2;
  const int head = blockIdx.y;  // [0, heads + 2 kv_heads)
  float* h = qkv + static_cast<size_t>(blockIdx.x) * width + head * head_dim;
  if (bias) {
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) h[i] += bias[head * head_dim + i];
  }
  if (head >= heads + kv_heads) return;  // a v head
  const float* norm = head < heads ? q_norm : k_norm;
  if (norm) {
    __syncthreads();
    float sum = 0.0f;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) sum += h[i] * h[i];
    const float inv = rsqrtf(BlockSum(sum) / head_dim + eps);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) h[i] = norm[i] * (h[i] * inv);
  }
  __syncthreads();
  RopeHead(h, half, cos + static_cast<size_t>(blockIdx.x) * half, sin + static_cast<size_t>(blockIdx.x) * half,
           threadIdx.x, blockDim.x);
}

__global__ void RopeKernel(float* x, int64_t stride, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  float* h = x + blockIdx.x * stride + static_cast<int64_t>(blockIdx.y) * head_dim;
  RopeHead(h, half, cos + static_cast<size_t>(blockIdx.x) * half, sin + static_cast<size_t>(blockIdx.x) * half,
           threadIdx.x, blockDim.x);
}

// Threads for a per-head block: a multiple of 32 covering head_dim.
int HeadThreads(int head_dim) { return head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : 128; }

}  // namespace

int EmbedRows(const void* table, Dtype dtype, const int32_t* tokens, int rows, int hidden, float* out,
              void* stream) {
  if (rows < 0 || hidden <= 0 || !table || !tokens || !out) return Invalid();
  if (rows == 0) return 0;
  EmbedKernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(table, dtype, tokens, hidden, out);
  return Launched();
}

int AddRmsNormF32(float* x, const float* delta, const float* weight, float eps, int rows, int cols, float* out,
                  void* stream) {
  if (rows < 0 || cols <= 0 || !x || !delta || !weight || !out) return Invalid();
  if (rows == 0) return 0;
  AddRmsNormKernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, delta, weight, eps, cols, out);
  return Launched();
}

int GatherRmsNormF32(const float* in, const int64_t* index, const float* weight, float eps, int rows, int cols,
                     float* out, void* stream) {
  if (rows < 0 || cols <= 0 || !in || !index || !weight || !out) return Invalid();
  if (rows == 0) return 0;
  GatherRmsNormKernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(in, index, weight, eps, cols, out);
  return Launched();
}

int SiluMulBf16(const uint16_t* gate_up, int64_t ld, int rows, int groups, int inter, uint16_t* out, void* stream) {
  if (rows < 0 || groups <= 0 || inter <= 0 || !gate_up || !out || ld < 2 * static_cast<int64_t>(groups) * inter)
    return Invalid();
  if (rows == 0) return 0;
  SiluMulBf16Kernel<<<dim3(rows, groups), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(gate_up), ld, inter, reinterpret_cast<__nv_bfloat16*>(out));
  return Launched();
}

int SiluMulF32(float* data, int rows, int groups, int inter, void* stream) {
  if (rows < 0 || groups <= 0 || inter <= 0 || !data) return Invalid();
  if (rows == 0) return 0;
  // Group g writes where group g / 2 read: groups run in order, one launch each.
  for (int g = 0; g < groups; ++g) {
    SiluMulKernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(data, 2 * groups * inter, g, inter);
    if (const int code = Launched(); code != 0) return code;
  }
  return 0;
}

int AddF32(float* x, const float* delta, int64_t n, void* stream) {
  if (n < 0 || !x || !delta) return Invalid();
  if (n == 0) return 0;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  AddKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0,
              static_cast<cudaStream_t>(stream)>>>(x, delta, n);
  return Launched();
}

int F32ToBf16(const float* in, int64_t in_stride, int rows, int cols, uint16_t* out, void* stream) {
  if (rows < 0 || cols <= 0 || in_stride < cols || !in || !out) return Invalid();
  if (rows == 0) return 0;
  ToBf16Kernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(in, in_stride, cols,
                                                                         reinterpret_cast<__nv_bfloat16*>(out));
  return Launched();
}

int PrepareQk(float* qkv, int rows, int heads, int kv_heads, int head_dim, const float* bias, const float* q_norm,
              const float* k_norm, float eps, const float* cos, const float* sin, void* stream) {
  if (rows < 0 || heads <= 0 || kv_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || !qkv || !cos || !sin) {
    return Invalid();
  }
  if (rows == 0) return 0;
  const dim3 grid(rows, heads + 2 * kv_heads);
  PrepareQkKernel<<<grid, HeadThreads(head_dim), 0, static_cast<cudaStream_t>(stream)>>>(
      qkv, heads, kv_heads, head_dim, bias, q_norm, k_norm, eps, cos, sin);
  return Launched();
}

int ApplyRope(float* x, int64_t stride, int rows, int heads, int head_dim, const float* cos, const float* sin,
              void* stream) {
  if (rows < 0 || heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || stride < heads * head_dim || !x || !cos ||
      !sin) {
    return Invalid();
  }
  if (rows == 0) return 0;
  RopeKernel<<<dim3(rows, heads), HeadThreads(head_dim), 0, static_cast<cudaStream_t>(stream)>>>(x, stride, head_dim,
                                                                                                cos, sin);
  return Launched();
}

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return count;
}

}  // namespace floe::cuda
