// AVX512_BF16 micro-kernels for matmul.h; the panel layout ([k/2][16][2] bf16)
// is exactly vdpbf16ps's operand, so one aligned 64-byte load feeds sixteen
// outputs with a pair of k each.
#include "kernels/cpu/matmul_bf16_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/matmul_tiles.h"

#define FLOE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace floe::cpu::internal {
namespace {

// Activation rows in bf16 are padded to a multiple of this many elements (one
// conversion step), with zeros past k, so the kernels read whole pairs.
constexpr int64_t kRowAlign = 32;

// Rows per micro-kernel and panels for a block of `rows` rows: accumulators
// (rows * panels zmm) plus the panels' weights and one broadcast stay within
// the 32 zmm registers.
constexpr int kMaxRows = 12;
constexpr int PanelsFor(int rows) { return rows <= 4 ? 4 : 2; }
static_assert(kPanelGroup % PanelsFor(1) == 0 && kPanelGroup % PanelsFor(kMaxRows) == 0);
static_assert(kMaxRows * PanelsFor(kMaxRows) + PanelsFor(kMaxRows) + 1 <= 32);
int PanelsForRows(int rows) { return PanelsFor(rows); }

// C[MR, NP*16] = X[MR, k] . panels^T; every output accumulates the pairs of k
// in order from 0, whatever MR and NP.
template <int MR, int NP>
FLOE_BF16_TARGET void DotKernel(const uint16_t* __restrict x, int64_t ldx, int64_t k,
                                const uint8_t* __restrict panels, int64_t panel_bytes,
                                float* __restrict c, int64_t ldc) {
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  const int64_t pairs = (k + 1) / 2;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    __m512bh wv[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      wv[p] = reinterpret_cast<__m512bh>(
          _mm512_loadu_si512(panels + p * panel_bytes + kp * kPanelWidth * 4));
    }
    const uint16_t* x_kp = x + 2 * kp * MR;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, x_kp + 2 * r, sizeof(pair));
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], xb, wv[p]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) _mm512_storeu_ps(c + r * ldc + p * kPanelWidth, acc[r][p]);
  }
}

template <int... kRows>
constexpr auto MakeKernelTable(std::integer_sequence<int, kRows...>) {
  return std::array<MicroKernelFn<uint16_t>, sizeof...(kRows)>{
      &DotKernel<kRows + 1, PanelsFor(kRows + 1)>...};
}

// dst[0, padded) = bf16(src[0, k)) rounded to nearest even, zeros past k.
FLOE_BF16_TARGET void ConvertRow(const float* src, int64_t k, int64_t padded, uint16_t* dst) {
  for (int64_t i = 0; i < padded; i += kRowAlign) {
    const int64_t left = k - i;
    const __mmask16 lo = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1;
    const __mmask16 hi = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1;
    const __m512 a = _mm512_maskz_loadu_ps(lo, src + i);
    const __m512 b = _mm512_maskz_loadu_ps(hi, src + i + 16);
    // cvtne2ps puts its second operand in the low half.
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
  }
}

}  // namespace

bool CpuHasBf16Dot() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
}

void MatmulBf16Dot(const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
                   ThreadPool& pool, MatmulScratch& scratch) {
  static constexpr auto kKernels = MakeKernelTable(std::make_integer_sequence<int, kMaxRows>());
  const int64_t k = w.k();
  const int64_t padded = (k + kRowAlign - 1) / kRowAlign * kRowAlign;
  uint16_t* xb = scratch.Bf16(m * padded + padded);
  // Row blocks of kMaxRows (RunTiles' row tiles) interleaved by pairs of k:
  // block b holds rows [b * kMaxRows, ...) as [pairs][rows][2], so a
  // micro-kernel reads its rows' pairs from one contiguous stream.
  const int64_t blocks = (m + kMaxRows - 1) / kMaxRows;
  pool.ParallelFor(blocks, m * k, [&](int64_t b, int) {
    const int64_t row0 = b * kMaxRows;
    const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, m - row0));
    uint16_t* block = xb + row0 * padded;
    alignas(64) uint16_t tmp[kMaxRows][4096];
    for (int64_t k0 = 0; k0 < padded; k0 += 4096) {
      const int64_t width = std::min<int64_t>(4096, padded - k0);
      for (int r = 0; r < rows; ++r) {
        ConvertRow(x + (row0 + r) * ldx + k0, std::max<int64_t>(0, std::min(width, k - k0)), width, tmp[r]);
      }
      uint32_t* dst = reinterpret_cast<uint32_t*>(block) + k0 / 2 * rows;
      for (int64_t kp = 0; kp < width / 2; ++kp) {
        for (int r = 0; r < rows; ++r) std::memcpy(&dst[kp * rows + r], &tmp[r][2 * kp], 4);
      }
    }
  });
  const KernelSet<uint16_t> set{kKernels.data(), kMaxRows, &PanelsForRows};
  RunTiles(set, xb, padded, m, w, y, pool);
}

}  // namespace floe::cpu::internal
