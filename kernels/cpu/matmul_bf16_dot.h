// Internal to the matmul kernels: the AVX512_BF16 path for bf16 weights
// (vdpbf16ps: two bf16 products per f32 lane per instruction). The code is
// compiled for AVX512_BF16 only inside its functions (target attributes), so
// the rest of the binary still runs on any x86-64; callers check
// CpuHasBf16Dot() first.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace floe::cpu::internal {

// The CPU executes AVX512F and AVX512_BF16.
bool CpuHasBf16Dot();
// The CPU executes AVX512_VBMI too, which the 8-bit kernels also need.
bool CpuHasByteLookups();

// Y = X . W^T for bf16 or (with CpuHasByteLookups) 8-bit w: rounds X to
// bf16 (nearest even) into scratch, then runs the dot-product micro-kernels
// under RunTiles.
void MatmulBf16Dot(const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
                   ThreadPool& pool, MatmulScratch& scratch);

}  // namespace floe::cpu::internal
