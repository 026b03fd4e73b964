// Helpers of the CUDA kernel tests: device copies of host vectors, seeded
// inputs, and the skip where no device is visible.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/model_kernels.h"
#include "kernels/cuda/rmsnorm.h"

#define FLOE_REQUIRE_CUDA_DEVICE() \
  if (::floe::cuda::DeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device"
#define ASSERT_CUDA(code) ASSERT_EQ((code), 0) << ::floe::cuda::ErrorString(code)

namespace floe::cuda_test {

// Device copy of a host vector, freed with it.
template <class T>
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<T>& host) : size_(host.size()) {
    cudaMalloc(&ptr_, std::max<size_t>(size_, 1) * sizeof(T));
    cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  ~DeviceVec() { cudaFree(ptr_); }
  T* get() const { return ptr_; }
  std::vector<T> Host() const {
    std::vector<T> out(size_);
    cudaMemcpy(out.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t size_;
};

inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace floe::cuda_test
