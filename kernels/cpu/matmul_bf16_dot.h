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

// Y = X . W^T for bf16 w: rounds X to bf16 (nearest even) into scratch, then
// runs the dot-product micro-kernels under RunTiles.
void MatmulBf16Dot(const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
                   ThreadPool& pool, MatmulScratch& scratch);

}  // namespace floe::cpu::internal
