// Y[m, n] = X[m, k] . W[n, k]^T with X and Y f32 and W bf16, f32 or 8-bit
// quantized (i8 or f8_e4m3 with a scale per output row) (HF layout, row-major
// [out, in]).
//
// W is repacked once (at backend construction) into panels of kPanelWidth
// output rows: panel p holds rows [16p, 16p+16) as
//   bf16: [ceil(k/2)][16][2]  (pairs of consecutive k per output row: one
//         512-bit load is one vdpbf16ps operand, or widens to two f32 vectors)
//   f32:  [k][16]
//   i8, f8_e4m3: [ceil(k/4)] chunks of 64 bytes, each two pairs of k as
//         [16][2] bytes interleaved in runs of 8 (internal::Byte8Offset), so
//         that a table lookup and two byte-unpacks widen a chunk to two
//         vdpbf16ps operands; after the last panel, the row scales as f32
// zero-padded to a multiple of 16 rows and an even k (8-bit: a multiple of 4).
// A slice (PackedMatrix::Slice) is a view of whole panels and a range of k
// of a packed matrix: the same memory, read with the parent's panel stride,
// so one packing serves two shardings (Shift Parallelism's TP mode reads its
// shard inside the SP x TP one).
//
// Precision contract. f32 weights: activations stay f32. bf16 weights: each
// activation is rounded to bf16 (to nearest even) on entry, as llama.cpp and
// HF bf16 inference do, and products are summed in f32. A product of two bf16
// is exact in f32, so a result depends only on its summation order. On CPUs
// with AVX512_BF16 one vdpbf16ps sums a pair of k per instruction (twice the
// f32 FMA rate: prefill and verification are compute-bound on CPU);
// elsewhere the rounded activations go through f32 FMAs. 8-bit weights: the
// same, on the weights widened exactly to bf16 inside the micro-kernel (no
// bf16 copy of the matrix exists), and each output multiplied by its row's
// scale at the end: Y = scale[n] * sum_k bf16(x) * q.
//
// Batch invariance by construction: every kernel (decode GEMV for small m,
// register-blocked GEMM for larger m) computes each output as the same
// sequence of accumulations over k = 0, 1, ..., k-1 from 0, so a row's result
// is bit-identical whatever m, the row's position in X, the thread count or
// the kernel chosen. (Not across machines: the AVX512_BF16 path and the FMA
// path differ in the last bits.)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/tensor/tensor_view.h"
#include "kernels/cpu/thread_pool.h"

namespace floe::cpu {

inline constexpr int kPanelWidth = 16;
// Panels are padded to a multiple of this (the kernels' column blocking).
inline constexpr int kPanelGroup = 4;

class PackedMatrix {
 public:
  PackedMatrix() = default;
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  DType dtype() const { return dtype_; }
  int64_t num_panels() const { return (n_ + kPanelWidth - 1) / kPanelWidth; }
  // Elements (bf16 or f32) from one panel to the next.
  int64_t panel_elems() const { return panel_elems_; }
  const void* panel(int64_t p) const { return base_ + p * panel_elems_ * DTypeSize(dtype_); }
  // 8-bit dtypes: the scale of each output row (a slice's first row at [0]);
  // null otherwise.
  const float* scales() const { return scales_; }
  // Bytes of the packing this matrix owns or views (a slice: its parent's).
  size_t bytes() const { return bytes_; }
  bool is_slice() const { return slice_; }

  // Output rows [row_begin, row_end) over inputs [k_begin, k_end): a view
  // sharing this matrix's memory (kept alive by the view). row_begin is a
  // multiple of kPanelWidth, row_end one too or n(); k_begin is even (8-bit:
  // a multiple of 4).
  // Results are bit-identical to packing the same block on its own.
  PackedMatrix Slice(int64_t row_begin, int64_t row_end, int64_t k_begin, int64_t k_end) const;

  // Bytes PackMatrix lays out for an [n, k] matrix of `dtype` (padding
  // included): what bytes() of a non-slice is.
  static size_t PackedBytes(DType dtype, int64_t n, int64_t k);
  // A non-slice's packed bytes, to store them (a weight cache file).
  const void* data() const { return base_; }
  // The matrix whose packed bytes (PackedBytes(dtype, n, k) of them, as
  // data() gave them) are at `data`, 64-byte aligned, kept alive by `owner`:
  // a view of a mapped weight cache file, no copy.
  static PackedMatrix FromPackedBytes(DType dtype, int64_t n, int64_t k, const void* data,
                                      std::shared_ptr<void> owner);
  // Row `row` of the matrix, widened to f32 (exact for bf16 and f32; 8-bit:
  // each weight times the row's scale, rounded once): an
  // embedding lookup in a tied lm_head's packing, so the table is not held
  // a second time.
  void ReadRow(int64_t row, float* out) const;

 private:
  friend PackedMatrix PackMatrixInto(std::span<const TensorView>, ThreadPool&, void*, std::shared_ptr<void>);
  DType dtype_ = DType::kF32;
  int64_t n_ = 0, k_ = 0, panel_elems_ = 0;
  size_t bytes_ = 0;
  bool slice_ = false;
  std::shared_ptr<void> storage_;
  const uint8_t* base_ = nullptr;
  const float* scales_ = nullptr;
};

// Packs the row-wise concatenation of `parts` (each [n_i, k], same k; bf16,
// f32 or 8-bit with row_scale set, all the same dtype; f16 is not accepted)
// into one matrix, so fused projections (q|k|v, gate|up) run as one matmul.
// Callers validate shapes.
PackedMatrix PackMatrix(std::span<const TensorView> parts, ThreadPool& pool);
// As PackMatrix, into PackedBytes(...) bytes at `dest` (64-byte aligned; a
// mapped weight cache file) that `owner` keeps alive.
PackedMatrix PackMatrixInto(std::span<const TensorView> parts, ThreadPool& pool, void* dest,
                            std::shared_ptr<void> owner);

// The activations' rounded copy for bf16 weights, kept by the caller (the
// backend) so that repeated calls do not allocate.
class MatmulScratch {
 public:
  // Buffers of at least `elems` elements; contents are not kept.
  uint16_t* Bf16(int64_t elems) { return Grow(bf16_, elems); }
  float* F32(int64_t elems) { return Grow(f32_, elems); }

 private:
  template <typename T>
  static T* Grow(std::vector<T>& v, int64_t elems) {
    if (static_cast<int64_t>(v.size()) < elems) v.resize(elems);
    return v.data();
  }
  std::vector<uint16_t> bf16_;
  std::vector<float> f32_;
};

// Y = X . W^T; x is [m, w.k()] with rows ldx floats apart (ldx < 0: w.k()),
// y is [m, w.n()] contiguous. scratch may be null (a call then allocates).
void Matmul(const float* x, int64_t m, const PackedMatrix& w, float* y, ThreadPool& pool,
            int64_t ldx = -1, MatmulScratch* scratch = nullptr);

// True when bf16 matmuls use the AVX512_BF16 dot-product kernels (the CPU has
// them and Highway's chosen target is AVX-512). For benchmarks' reports.
bool Bf16DotProductKernels();

}  // namespace floe::cpu
