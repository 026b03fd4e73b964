#include "kernels/cuda/rmsnorm.h"

#include <cuda_runtime.h>

namespace floe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RmsNormKernel(const float* __restrict__ x, const float* __restrict__ weight,
                              float eps, int cols, float* __restrict__ y) {
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float* out = y + static_cast<size_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < cols; i += kThreads) sum += row[i] * row[i];
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float inv;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    inv = rsqrtf(total / cols + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < cols; i += kThreads) out[i] = weight[i] * (row[i] * inv);
}

}  // namespace

int RmsNormF32(const float* x, const float* weight, float eps, int rows, int cols, float* y,
               void* stream) {
  if (rows < 0 || cols <= 0 || x == nullptr || weight == nullptr || y == nullptr) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (rows == 0) return 0;
  RmsNormKernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, weight, eps, cols, y);
  return static_cast<int>(cudaGetLastError());
}

const char* ErrorString(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace floe::cuda
