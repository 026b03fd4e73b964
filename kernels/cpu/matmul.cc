// Highway per-target kernels for matmul.h; see the layout notes there.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/tensor/dtype.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_bf16_dot.h"
#include "kernels/cpu/matmul_tiles.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace floe::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes per vector, capped at the panel width so a panel is whole vectors.
constexpr size_t kLanes = HWY_MAX_BYTES / 4 < 16 ? HWY_MAX_BYTES / 4 : 16;
using DF = hn::CappedTag<float, kLanes>;
using DU = hn::RebindToUnsigned<DF>;
constexpr int kVecsPerPanel = kPanelWidth / static_cast<int>(kLanes);

// Register blocking per target: rows per micro-kernel (kMaxRows) and panels
// per micro-kernel for a block of `rows` rows, sized so accumulators
// (rows * panels * kVecsPerPanel) plus widened weights fit the register file.
#if HWY_MAX_BYTES >= 64
constexpr int kMaxRows = 12;
constexpr int PanelsFor(int rows) { return rows <= 4 ? 4 : 2; }
#elif HWY_MAX_BYTES == 32
constexpr int kMaxRows = 5;
constexpr int PanelsFor(int rows) { return rows == 1 ? 2 : 1; }
#else
constexpr int kMaxRows = 2;
constexpr int PanelsFor(int) { return 1; }
#endif
static_assert(kPanelGroup % PanelsFor(1) == 0 && kPanelGroup % PanelsFor(kMaxRows) == 0);
static_assert(kMaxRows * PanelsFor(kMaxRows) <= 12 * kPanelGroup);  // RunTiles' tile buffer

// C[MR, NP*16] = X[MR, k] . panels^T. Each output: fma over k in order, from 0.
// Weight storage of a micro-kernel: f32, bf16 or one of the 8-bit types
// (widened through a scalar decode here: this is the path for CPUs without
// AVX512_BF16, kept simple rather than fast).
enum class WeightKind { kF32, kBf16, kI8, kF8E4M3 };

template <WeightKind kKind>
inline float Decode8(uint8_t bits, const float* f8_values) {
  if constexpr (kKind == WeightKind::kI8) {
    return static_cast<float>(static_cast<int8_t>(bits));
  } else {
    return f8_values[bits];
  }
}

template <int MR, int NP, WeightKind kKind>
HWY_NOINLINE void MicroKernel(const float* HWY_RESTRICT x, int64_t ldx, int64_t k,
                              const uint8_t* HWY_RESTRICT panels, int64_t panel_bytes,
                              float* HWY_RESTRICT c, int64_t ldc) {
  const DF df;
  const DU du;
  constexpr int NV = NP * kVecsPerPanel;
  hn::Vec<DF> acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(df);
  }
  const int64_t pairs = k / 2;
  if constexpr (kKind == WeightKind::kI8 || kKind == WeightKind::kF8E4M3) {
    // Even k for every row, then odd k, as the bf16 case below.
    const int64_t all_pairs = (k + 1) / 2;
    const float* f8_values = F8E4M3Values();
    for (int64_t kp = 0; kp < all_pairs; ++kp) {
      HWY_ALIGN float wd[2][NP * kPanelWidth];
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
        const uint8_t* src = panels + p * panel_bytes;
        for (int j = 0; j < kPanelWidth; ++j) {
          wd[0][p * kPanelWidth + j] = Decode8<kKind>(src[internal::Byte8Offset(2 * kp, j)], f8_values);
          wd[1][p * kPanelWidth + j] = Decode8<kKind>(src[internal::Byte8Offset(2 * kp + 1, j)], f8_values);
        }
      }
      for (int half = 0; half < (2 * kp + 1 < k ? 2 : 1); ++half) {
        hn::Vec<DF> wv[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) wv[v] = hn::Load(df, wd[half] + v * kLanes);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
          const auto xv = hn::Set(df, x[r * ldx + 2 * kp + half]);
#pragma GCC unroll 16
          for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(xv, wv[v], acc[r][v]);
        }
      }
    }
  } else if constexpr (kKind == WeightKind::kBf16) {
    const auto hi_mask = hn::Set(du, 0xFFFF0000u);
    const uint32_t* w[NP];
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p) w[p] = reinterpret_cast<const uint32_t*>(panels + p * panel_bytes);
    // Even k for every row, then odd k: the same per-output FMA order as a
    // plain k loop, with only one set of widened weights live (AVX2 has 16
    // registers); the odd half re-reads the pair from L1.
    auto step = [&](int64_t kp, bool odd_present) HWY_ATTR {
      hn::Vec<DF> wv[NV];
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 16
        for (int v = 0; v < kVecsPerPanel; ++v) {
          const auto u = hn::LoadU(du, w[p] + kp * kPanelWidth + v * kLanes);
          wv[p * kVecsPerPanel + v] = hn::BitCast(df, hn::ShiftLeft<16>(u));
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const auto xe = hn::Set(df, x[r * ldx + 2 * kp]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(xe, wv[v], acc[r][v]);
      }
      if (!odd_present) return;
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 16
        for (int v = 0; v < kVecsPerPanel; ++v) {
          const auto u = hn::LoadU(du, w[p] + kp * kPanelWidth + v * kLanes);
          wv[p * kVecsPerPanel + v] = hn::BitCast(df, hn::And(u, hi_mask));
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const auto xo = hn::Set(df, x[r * ldx + 2 * kp + 1]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(xo, wv[v], acc[r][v]);
      }
    };
    for (int64_t kp = 0; kp < pairs; ++kp) step(kp, true);
    if (k & 1) step(pairs, false);
  } else {
    const float* w[NP];
#pragma GCC unroll 16
    for (int p = 0; p < NP; ++p) w[p] = reinterpret_cast<const float*>(panels + p * panel_bytes);
    for (int64_t kk = 0; kk < k; ++kk) {
      hn::Vec<DF> wv[NV];
#pragma GCC unroll 16
      for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 16
        for (int v = 0; v < kVecsPerPanel; ++v) {
          wv[p * kVecsPerPanel + v] = hn::LoadU(df, w[p] + kk * kPanelWidth + v * kLanes);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const auto xv = hn::Set(df, x[r * ldx + kk]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(xv, wv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) hn::StoreU(acc[r][v], df, c + r * ldc + v * kLanes);
  }
}

template <WeightKind kKind, int... kRows>
constexpr auto MakeKernelTable(std::integer_sequence<int, kRows...>) {
  return std::array<internal::MicroKernelFn<float>, sizeof...(kRows)>{
      &MicroKernel<kRows + 1, PanelsFor(kRows + 1), kKind>...};
}

int PanelsForRows(int rows) { return PanelsFor(rows); }

void MatmulImpl(const float* x, int64_t ldx, int64_t m, const PackedMatrix& w, float* y,
                ThreadPool& pool) {
  static constexpr auto kBf16Kernels =
      MakeKernelTable<WeightKind::kBf16>(std::make_integer_sequence<int, kMaxRows>());
  static constexpr auto kF32Kernels =
      MakeKernelTable<WeightKind::kF32>(std::make_integer_sequence<int, kMaxRows>());
  static constexpr auto kI8Kernels =
      MakeKernelTable<WeightKind::kI8>(std::make_integer_sequence<int, kMaxRows>());
  static constexpr auto kF8Kernels =
      MakeKernelTable<WeightKind::kF8E4M3>(std::make_integer_sequence<int, kMaxRows>());
  const DType dtype = w.dtype();
  const internal::KernelSet<float> set{dtype == DType::kBF16 ? kBf16Kernels.data()
                                       : dtype == DType::kI8 ? kI8Kernels.data()
                                       : dtype == DType::kF8E4M3 ? kF8Kernels.data()
                                                                 : kF32Kernels.data(),
                                       kMaxRows, &PanelsForRows};
  internal::RunTiles(set, x, ldx, m, w, y, pool, w.scales());
}

}  // namespace HWY_NAMESPACE
}  // namespace floe::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace floe::cpu {

HWY_EXPORT(MatmulImpl);

bool Bf16DotProductKernels() {
  return (hwy::SupportedTargets() & HWY_AVX3) != 0 && internal::CpuHasBf16Dot();
}

void Matmul(const float* x, int64_t m, const PackedMatrix& w, float* y, ThreadPool& pool,
            int64_t ldx, MatmulScratch* scratch) {
  if (m <= 0 || w.n() == 0) return;
  const int64_t k = w.k();
  if (ldx < 0) ldx = k;
  MatmulScratch local_scratch;
  MatmulScratch& s = scratch != nullptr ? *scratch : local_scratch;
  if (w.dtype() == DType::kBF16 || IsQuantized(w.dtype())) {
    if (Bf16DotProductKernels() && (!IsQuantized(w.dtype()) || internal::CpuHasByteLookups())) {
      internal::MatmulBf16Dot(x, ldx, m, w, y, pool, s);
      return;
    }
    // The same bf16-rounded activations as the dot-product path, through f32 FMAs.
    float* rounded = s.F32(m * k);
    pool.ParallelFor(m, m * k, [&](int64_t row, int) {
      for (int64_t i = 0; i < k; ++i) rounded[row * k + i] = Bf16ToF32(F32ToBf16(x[row * ldx + i]));
    });
    x = rounded;
    ldx = k;
  }
  HWY_DYNAMIC_DISPATCH(MatmulImpl)(x, ldx, m, w, y, pool);
}

namespace {

// Panels stored: the kernels read whole groups of kPanelGroup panels, and one
// more group of zeros lets a slice that starts mid-group do so too.
int64_t StoredPanels(int64_t n) {
  const int64_t panels = (n + kPanelWidth - 1) / kPanelWidth;
  return (panels + kPanelGroup - 1) / kPanelGroup * kPanelGroup + kPanelGroup;
}

int64_t PanelElems(DType dtype, int64_t k) {
  if (IsQuantized(dtype)) return kPanelWidth * ((k + 3) / 4 * 4);  // 64-byte panels
  return kPanelWidth * (dtype == DType::kBF16 ? (k + 1) / 2 * 2 : k);
}

// Bytes of the panels; 8-bit matrices keep their row scales after them.
size_t PanelBytes(DType dtype, int64_t n, int64_t k) {
  return static_cast<size_t>(StoredPanels(n) * PanelElems(dtype, k)) * DTypeSize(dtype);
}

}  // namespace

size_t PackedMatrix::PackedBytes(DType dtype, int64_t n, int64_t k) {
  const size_t scales = IsQuantized(dtype) ? StoredPanels(n) * kPanelWidth * sizeof(float) : 0;
  return std::max<size_t>(64, PanelBytes(dtype, n, k) + scales);
}

PackedMatrix PackedMatrix::FromPackedBytes(DType dtype, int64_t n, int64_t k, const void* data,
                                           std::shared_ptr<void> owner) {
  PackedMatrix m;
  m.dtype_ = dtype;
  m.n_ = n;
  m.k_ = k;
  m.panel_elems_ = PanelElems(dtype, k);
  m.bytes_ = PackedBytes(dtype, n, k);
  m.storage_ = std::move(owner);
  m.base_ = static_cast<const uint8_t*>(data);
  if (IsQuantized(dtype)) m.scales_ = reinterpret_cast<const float*>(m.base_ + PanelBytes(dtype, n, k));
  return m;
}

PackedMatrix PackMatrixInto(std::span<const TensorView> parts, ThreadPool& pool, void* dest,
                            std::shared_ptr<void> owner) {
  PackedMatrix packed;
  packed.dtype_ = parts.empty() ? DType::kF32 : parts[0].dtype;
  packed.k_ = parts.empty() ? 0 : parts[0].cols();
  std::vector<const TensorView*> row_part;
  std::vector<int64_t> row_in_part;
  for (const TensorView& part : parts) {
    for (int64_t r = 0; r < part.rows(); ++r) {
      row_part.push_back(&part);
      row_in_part.push_back(r);
    }
  }
  packed.n_ = static_cast<int64_t>(row_part.size());
  packed.panel_elems_ = PanelElems(packed.dtype_, packed.k_);
  const size_t elem = DTypeSize(packed.dtype_);
  const int64_t panel_elems = packed.panel_elems();
  const size_t bytes = PackedMatrix::PackedBytes(packed.dtype_, packed.n_, packed.k_);
  packed.bytes_ = bytes;
  packed.storage_ = std::move(owner);
  uint8_t* out = static_cast<uint8_t*>(dest);
  packed.base_ = out;
  const int64_t n = packed.n_, k = packed.k_;
  const int64_t panels = packed.num_panels();
  const size_t panel_bytes = panel_elems * elem;
  // Each task zeroes the panel it fills (padding rows and k), so the first
  // touch of the new memory is spread over the threads too.
  std::memset(out + panels * panel_bytes, 0, bytes - panels * panel_bytes);
  if (IsQuantized(packed.dtype_)) {
    float* scales = reinterpret_cast<float*>(out + PanelBytes(packed.dtype_, n, k));
    for (int64_t row = 0; row < n; ++row) scales[row] = row_part[row]->row_scale[row_in_part[row]];
    packed.scales_ = scales;
  }
  pool.ParallelFor(panels, [&](int64_t p, int) {
    std::memset(out + p * panel_bytes, 0, panel_bytes);
    for (int j = 0; j < kPanelWidth; ++j) {
      const int64_t row = p * kPanelWidth + j;
      if (row >= n) break;
      const TensorView& part = *row_part[row];
      const uint8_t* src = static_cast<const uint8_t*>(part.data) + row_in_part[row] * k * elem;
      if (packed.dtype_ == DType::kBF16) {
        const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
        uint16_t* d = reinterpret_cast<uint16_t*>(out) + p * panel_elems;
        for (int64_t kk = 0; kk < k; ++kk) d[(kk / 2 * kPanelWidth + j) * 2 + (kk & 1)] = s[kk];
      } else if (elem == 1) {
        uint8_t* d = out + p * panel_elems;
        const uint8_t flip = part.byte_xor;  // stored bytes to the weights' bits
        for (int64_t kk = 0; kk < k; ++kk) d[internal::Byte8Offset(kk, j)] = src[kk] ^ flip;
      } else {
        const float* s = reinterpret_cast<const float*>(src);
        float* d = reinterpret_cast<float*>(out) + p * panel_elems;
        for (int64_t kk = 0; kk < k; ++kk) d[kk * kPanelWidth + j] = s[kk];
      }
    }
  });
  return packed;
}

PackedMatrix PackMatrix(std::span<const TensorView> parts, ThreadPool& pool) {
  int64_t n = 0;
  for (const TensorView& part : parts) n += part.rows();
  const DType dtype = parts.empty() ? DType::kF32 : parts[0].dtype;
  const size_t bytes = PackedMatrix::PackedBytes(dtype, n, parts.empty() ? 0 : parts[0].cols());
  // 2 MiB-aligned and THP-advised: decode streams every weight once per step,
  // and huge pages spare it a TLB miss per 4 KiB (and packing the page faults).
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t alloc = bytes >= kHuge ? (bytes + kHuge - 1) / kHuge * kHuge : (bytes + 63) / 64 * 64;
  std::shared_ptr<void> storage(std::aligned_alloc(bytes >= kHuge ? kHuge : 64, alloc), &std::free);
  if (!storage) throw std::bad_alloc();
  if (bytes >= kHuge) madvise(storage.get(), alloc, MADV_HUGEPAGE);
  void* dest = storage.get();
  return PackMatrixInto(parts, pool, dest, std::move(storage));
}

void PackedMatrix::ReadRow(int64_t row, float* out) const {
  const int64_t j = row % kPanelWidth;
  if (dtype_ == DType::kBF16) {
    const uint16_t* p = static_cast<const uint16_t*>(panel(row / kPanelWidth));
    for (int64_t c = 0; c < k_; ++c) out[c] = Bf16ToF32(p[(c / 2 * kPanelWidth + j) * 2 + (c & 1)]);
  } else if (IsQuantized(dtype_)) {
    const uint8_t* p = static_cast<const uint8_t*>(panel(row / kPanelWidth));
    const float scale = scales_[row];
    for (int64_t c = 0; c < k_; ++c) {
      const uint8_t bits = p[internal::Byte8Offset(c, static_cast<int>(j))];
      out[c] = (dtype_ == DType::kI8 ? static_cast<float>(static_cast<int8_t>(bits)) : F8E4M3ToF32(bits)) * scale;
    }
  } else {
    const float* p = static_cast<const float*>(panel(row / kPanelWidth));
    for (int64_t c = 0; c < k_; ++c) out[c] = p[c * kPanelWidth + j];
  }
}

PackedMatrix PackedMatrix::Slice(int64_t row_begin, int64_t row_end, int64_t k_begin, int64_t k_end) const {
  if (row_begin < 0 || row_begin > row_end || row_end > n_ || row_begin % kPanelWidth != 0 ||
      (row_end % kPanelWidth != 0 && row_end != n_) || k_begin < 0 || k_begin > k_end || k_end > k_ ||
      k_begin % (IsQuantized(dtype_) ? 4 : 2) != 0) {
    std::fprintf(stderr, "PackedMatrix::Slice: rows [%lld, %lld) of %lld, k [%lld, %lld) of %lld\n",
                 static_cast<long long>(row_begin), static_cast<long long>(row_end), static_cast<long long>(n_),
                 static_cast<long long>(k_begin), static_cast<long long>(k_end), static_cast<long long>(k_));
    std::abort();
  }
  PackedMatrix view = *this;
  view.slice_ = true;
  view.n_ = row_end - row_begin;
  view.k_ = k_end - k_begin;
  // Every layout holds input k of a panel at element offset k * kPanelWidth
  // ([k/2][16][2] for bf16 with k even, [k][16] for f32, chunks of 4 k for
  // 8-bit with k a multiple of 4).
  view.base_ = static_cast<const uint8_t*>(panel(row_begin / kPanelWidth)) + k_begin * kPanelWidth * DTypeSize(dtype_);
  if (scales_) view.scales_ = scales_ + row_begin;
  return view;
}

}  // namespace floe::cpu
#endif  // HWY_ONCE
