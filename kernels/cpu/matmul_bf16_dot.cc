// AVX512_BF16 micro-kernels for matmul.h; the panel layout ([k/2][16][2] bf16)
// is exactly vdpbf16ps's operand, so one aligned 64-byte load feeds sixteen
// outputs with a pair of k each. 8-bit panels have the same layout in bytes:
// 32 bytes widen exactly to that operand in registers.
#include "kernels/cpu/matmul_bf16_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "common/tensor/dtype.h"
#include "kernels/cpu/matmul_tiles.h"

#define FLOE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
// The 8-bit kernels' byte lookups (vpermt2b) need AVX512_VBMI as well.
#define FLOE_Q8_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))

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

// How a panel's weights are stored, and so how they become vdpbf16ps operands.
enum class Weights { kBf16, kI8, kF8E4M3 };

// bf16 bit patterns of the 8-bit codes, split into byte planes for vpermt2b
// (which looks up 128 bytes by an index's low 7 bits). f8_e4m3: by the
// magnitude bits (the sign is bit 7 in both formats, ORed back in). i8: the
// non-negative values 0..127 and, for a set sign bit, -128..-1.
struct alignas(64) Tables {
  uint8_t lo[2][128], hi[2][128];  // [0]: f8 magnitudes or i8 >= 0; [1]: i8 < 0
};

Tables MakeTables(Weights w) {
  Tables t{};
  for (int i = 0; i < 128; ++i) {
    for (int neg = 0; neg < 2; ++neg) {
      const float v = w == Weights::kF8E4M3 ? (neg ? 0.0f : F8E4M3ToF32(static_cast<uint8_t>(i)))
                                            : static_cast<float>(neg ? i - 128 : i);
      // Exact: e4m3 values and integers up to 128 fit bf16's 8 significant bits.
      const uint16_t bits = std::isnan(v) ? uint16_t{0x7FC0} : F32ToBf16(v);
      t.lo[neg][i] = static_cast<uint8_t>(bits & 0xFF);
      t.hi[neg][i] = static_cast<uint8_t>(bits >> 8);
    }
  }
  return t;
}

const Tables kI8Tables = MakeTables(Weights::kI8);
const Tables kF8Tables = MakeTables(Weights::kF8E4M3);

// One 64-byte chunk of an 8-bit panel (two pairs of k, matmul_tiles.h's
// Byte8Offset) widened exactly to the bf16 operands of its pairs.
template <Weights W>
FLOE_Q8_TARGET inline void DecodeChunk(const uint8_t* p, const Tables& t, __m512bh& even, __m512bh& odd) {
  const __m512i v = _mm512_loadu_si512(p);
  const __m512i lo0 = _mm512_load_si512(t.lo[0]), lo1 = _mm512_load_si512(t.lo[0] + 64);
  const __m512i hi0 = _mm512_load_si512(t.hi[0]), hi1 = _mm512_load_si512(t.hi[0] + 64);
  __m512i lo = _mm512_permutex2var_epi8(lo0, v, lo1);
  __m512i hi = _mm512_permutex2var_epi8(hi0, v, hi1);
  if constexpr (W == Weights::kF8E4M3) {
    hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);  // hi | (v & 0x80)
  } else {
    const __mmask64 negative = _mm512_movepi8_mask(v);
    const __m512i lo_neg = _mm512_permutex2var_epi8(_mm512_load_si512(t.lo[1]), v, _mm512_load_si512(t.lo[1] + 64));
    const __m512i hi_neg = _mm512_permutex2var_epi8(_mm512_load_si512(t.hi[1]), v, _mm512_load_si512(t.hi[1] + 64));
    lo = _mm512_mask_blend_epi8(negative, lo, lo_neg);
    hi = _mm512_mask_blend_epi8(negative, hi, hi_neg);
  }
  even = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi));
  odd = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi));
}

// acc[r][p] += the MR rows' pair kp (x: [pairs][MR][2]) times operand wv[p].
template <int MR, int NP>
FLOE_BF16_TARGET inline void DotPair(__m512 (&acc)[MR][NP], const uint16_t* __restrict x, int64_t kp,
                                     const __m512bh* wv) {
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

template <int MR, int NP>
FLOE_BF16_TARGET inline void StoreTile(const __m512 (&acc)[MR][NP], float* __restrict c, int64_t ldc) {
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) _mm512_storeu_ps(c + r * ldc + p * kPanelWidth, acc[r][p]);
  }
}

// How far ahead in each panel the 8-bit kernels prefetch. Decoding a chunk
// takes longer than loading a bf16 pair, so fewer loads are in flight and the
// hardware prefetcher alone left decode (m = 1) at ~40 GB/s; 2 KiB ahead
// reached ~50 (bench/engine/bench_quantized.cc, docs/quantization.md).
constexpr int64_t kPrefetchAhead = 2048;

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
      const uint8_t* at = panels + p * panel_bytes + kp * kPanelWidth * 4;
      _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchAhead), _MM_HINT_T0);
      wv[p] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(at));
    }
    DotPair<MR, NP>(acc, x, kp, wv);
  }
  StoreTile<MR, NP>(acc, c, ldc);
}


// The same for 8-bit panels, a chunk (two pairs) at a time, the same pairs
// in the same order as DotKernel over the widened panels (an odd number of
// pairs leaves the last chunk's second pair as padding, skipped).
template <int MR, int NP, Weights W>
FLOE_Q8_TARGET void DotKernel8(const uint16_t* __restrict x, int64_t ldx, int64_t k,
                               const uint8_t* __restrict panels, int64_t panel_bytes,
                               float* __restrict c, int64_t ldc) {
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  const Tables& tables = W == Weights::kI8 ? kI8Tables : kF8Tables;
  const int64_t pairs = (k + 1) / 2;
  const int64_t full_chunks = pairs / 2;
  for (int64_t kq = 0; kq < full_chunks; ++kq) {
    __m512bh even[NP], odd[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(panels + p * panel_bytes + kq * 64 + kPrefetchAhead), _MM_HINT_T0);
      DecodeChunk<W>(panels + p * panel_bytes + kq * 64, tables, even[p], odd[p]);
    }
    DotPair<MR, NP>(acc, x, 2 * kq, even);
    DotPair<MR, NP>(acc, x, 2 * kq + 1, odd);
  }
  if (pairs % 2 != 0) {  // the last chunk holds one pair and padding
    __m512bh even[NP], odd[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) DecodeChunk<W>(panels + p * panel_bytes + full_chunks * 64, tables, even[p], odd[p]);
    DotPair<MR, NP>(acc, x, 2 * full_chunks, even);
  }
  StoreTile<MR, NP>(acc, c, ldc);
}

// PanelWidener::widen for 8-bit panels of type W.
template <Weights W>
FLOE_Q8_TARGET void WidenPanels(const uint8_t* src, int64_t src_panel, int64_t k, int count, uint16_t* dst,
                                int64_t dst_panel) {
  const Tables& tables = W == Weights::kI8 ? kI8Tables : kF8Tables;
  const int64_t chunks = ((k + 1) / 2 + 1) / 2;
  for (int p = 0; p < count; ++p) {
    uint16_t* out = dst + p * dst_panel;
    for (int64_t kq = 0; kq < chunks; ++kq) {
      __m512bh even, odd;
      DecodeChunk<W>(src + p * src_panel + kq * 64, tables, even, odd);
      _mm512_storeu_si512(out + kq * 64, reinterpret_cast<__m512i>(even));
      _mm512_storeu_si512(out + kq * 64 + 32, reinterpret_cast<__m512i>(odd));
    }
  }
}

template <Weights W, int... kRows>
constexpr auto MakeKernelTable(std::integer_sequence<int, kRows...>) {
  if constexpr (W == Weights::kBf16) {
    return std::array<MicroKernelFn<uint16_t>, sizeof...(kRows)>{&DotKernel<kRows + 1, PanelsFor(kRows + 1)>...};
  } else {
    return std::array<MicroKernelFn<uint16_t>, sizeof...(kRows)>{
        &DotKernel8<kRows + 1, PanelsFor(kRows + 1), W>...};
  }
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

bool CpuHasByteLookups() { return __builtin_cpu_supports("avx512vbmi"); }

void MatmulBf16Dot(const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
                   ThreadPool& pool, MatmulScratch& scratch) {
  static constexpr auto kBf16 = MakeKernelTable<Weights::kBf16>(std::make_integer_sequence<int, kMaxRows>());
  static constexpr auto kI8 = MakeKernelTable<Weights::kI8>(std::make_integer_sequence<int, kMaxRows>());
  static constexpr auto kF8 = MakeKernelTable<Weights::kF8E4M3>(std::make_integer_sequence<int, kMaxRows>());
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
  const auto& kernels = w.dtype() == DType::kI8 ? kI8 : w.dtype() == DType::kF8E4M3 ? kF8 : kBf16;
  const KernelSet<uint16_t> set{kernels.data(), kMaxRows, &PanelsForRows};
  // i8 panels are widened once per task when it has several row blocks: their
  // lookup (two tables and a blend per byte plane) cost prefill ~10% in
  // registers. f8_e4m3's single lookup is cheaper in registers than a pass
  // through a buffer (measured: docs/quantization.md).
  const PanelWidener<uint16_t> widener{&WidenPanels<Weights::kI8>, {kBf16.data(), kMaxRows, &PanelsForRows}};
  RunTiles(set, xb, padded, m, w, y, pool, w.scales(), w.dtype() == DType::kI8 ? &widener : nullptr);
}

}  // namespace floe::cpu::internal
