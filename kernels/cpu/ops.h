// Row-wise f32 kernels of the Llama forward pass (Highway, dispatched at run
// time). All take contiguous rows; none allocates. Single-row functions are
// called per row by the backend, which spreads rows over its ThreadPool.
#pragma once

#include <cstdint>
#include <span>

#include "common/tensor/tensor_view.h"

namespace floe::cpu {

// The SIMD target (Highway's name, e.g. "AVX2", "AVX3") the kernels run on.
const char* SimdTargetName();

// y = x / sqrt(mean(x^2) + eps) * weight (HF LlamaRMSNorm in f32). y may alias x.
void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* y);

// out = silu(gate) * up; out may alias gate or up.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// y += x.
void AddInPlace(float* y, const float* x, int64_t n);

// Rows of `table` ([vocab, dim], bf16 or f32) for each id, widened to f32,
// into out [ids.size(), dim]. Ids must be in range (the backend validates).
void EmbeddingLookup(const TensorView& table, std::span<const int32_t> ids, float* out);

}  // namespace floe::cpu
