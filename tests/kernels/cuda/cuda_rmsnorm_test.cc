// The CUDA RMSNorm against the CPU kernel (needs a GPU; label gpu).
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/model_kernels.h"
#include "kernels/cuda/rmsnorm.h"

namespace floe {
namespace {

TEST(CudaRmsNormTest, MatchesCpuKernel) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  for (int cols : {1, 3, 17, 64, 257, 2048, 4099}) {
    const int rows = 5;
    std::mt19937 rng(cols);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(rows * cols), w(cols), y(rows * cols), ref(rows * cols);
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = 1.0f + 0.1f * dist(rng);
    float *dx = nullptr, *dw = nullptr, *dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, y.size() * 4), cudaSuccess);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
    const int code = cuda::RmsNormF32(dx, dw, 1e-5f, rows, cols, dy, nullptr);
    ASSERT_EQ(code, 0) << cuda::ErrorString(code);
    ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int r = 0; r < rows; ++r) cpu::RmsNorm(&x[r * cols], w.data(), 1e-5f, cols, &ref[r * cols]);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], ref[i], 1e-5f * (1.0f + std::abs(ref[i]))) << "cols " << cols << " at " << i;
    }
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
  }
  EXPECT_NE(cuda::RmsNormF32(nullptr, nullptr, 1e-5f, 1, 1, nullptr, nullptr), 0);
}

}  // namespace
}  // namespace floe
