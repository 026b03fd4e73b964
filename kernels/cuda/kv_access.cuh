// Device helpers shared by the attention kernels (attention.cu,
// prefill_mma.cu): cache addressing, exact widening of cache elements,
// narrowing for writes, and the launchers' argument checks. Internal to
// kernels/cuda; included only by .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/model_kernels.h"

namespace floe::cuda::internal {

inline int Launched() { return static_cast<int>(cudaGetLastError()); }
inline int Invalid() { return static_cast<int>(cudaErrorInvalidValue); }

__device__ __forceinline__ int64_t Offset(const PagedKv& kv, int32_t block, int head, int slot) {
  return ((static_cast<int64_t>(block) * kv.kv_heads + head) * kv.block_size + slot) * kv.head_dim;
}

// A cache element widened to f32, exactly, as the CPU kernels widen it:
// bf16 bits into the high half; e4m3's fields moved to f32's places (bias
// 127 where e4m3's is 7, so times 2^120; subnormals scale exactly).
__device__ __forceinline__ float Widen(float x) { return x; }
__device__ __forceinline__ float Widen(uint16_t x) { return __uint_as_float(static_cast<uint32_t>(x) << 16); }
__device__ __forceinline__ float Widen(uint8_t x) {
  const uint32_t bits = ((x & 0x80u) << 24) | ((x & 0x7fu) << 20);
  return __uint_as_float(bits) * 0x1p120f;
}

// A value narrowed for the cache, as the CPU's WriteKv narrows it.
template <class T>
__device__ __forceinline__ T Narrow(float x, float scale);
template <>
__device__ __forceinline__ float Narrow<float>(float x, float) {
  return x;
}
template <>
__device__ __forceinline__ uint16_t Narrow<uint16_t>(float x, float) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
template <>
__device__ __forceinline__ uint8_t Narrow<uint8_t>(float x, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3));
}

// Calls fn(T{}) with the C++ type of a cache element of `dtype`.
template <class Fn>
int ForKvType(KvDtype dtype, Fn&& fn) {
  switch (dtype) {
    case KvDtype::kF32: return fn(float{});
    case KvDtype::kBf16: return fn(uint16_t{});
    case KvDtype::kFp8E4m3: return fn(uint8_t{});
  }
  return Invalid();
}

inline bool ValidKv(const PagedKv& kv) {
  const bool scales = kv.dtype != KvDtype::kFp8E4m3 ? kv.k_scale == 1.0f && kv.v_scale == 1.0f
                                                     : kv.k_scale > 0.0f && kv.v_scale > 0.0f &&
                                                           std::isfinite(kv.k_scale) && std::isfinite(kv.v_scale);
  return kv.k && kv.v && kv.block_size > 0 && kv.kv_heads > 0 && kv.head_dim > 0 && scales &&
         (kv.dtype == KvDtype::kF32 || kv.dtype == KvDtype::kBf16 || kv.dtype == KvDtype::kFp8E4m3);
}
inline bool ValidStep(const StepLayout& s) {
  // paths may be null: a step without trees has none.
  return s.rows >= 0 && s.write_pos && s.table && s.context && s.path_begin && s.path_end && s.tables;
}


}  // namespace floe::cuda::internal
