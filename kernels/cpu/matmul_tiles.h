// Internal to the matmul kernels: how Y = X . W^T is cut into tasks and
// register tiles, shared by the Highway kernels (matmul.cc) and the
// AVX512-BF16 dot-product kernels (matmul_bf16_dot.cc), which differ only in
// the micro-kernel and the activation type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace floe::cpu::internal {

// Where weight (k = kk, row j of 16) sits in an 8-bit panel. The panel is
// 64-byte chunks of two pairs of k, 2c and 2c + 1, each pair being
// [16 rows][2] bytes as in bf16's layout; the two pairs' bytes are
// interleaved in runs of 8 so that one byte-unpack of a decoded chunk yields
// pair 2c (unpacklo) and the other pair 2c + 1 (unpackhi) as vdpbf16ps
// operands.
inline int64_t Byte8Offset(int64_t kk, int j) {
  const int64_t pair = kk / 2;
  const int b = j * 2 + static_cast<int>(kk & 1);  // byte within the pair's 32
  return pair / 2 * 64 + b / 8 * 16 + (pair & 1) * 8 + b % 8;
}

// C[rows, panels * 16] = X[rows, k] . panels^T for a block of rows; rows and
// panels are fixed by the kernel, ldx and ldc in elements.
template <typename X>
using MicroKernelFn = void (*)(const X* x, int64_t ldx, int64_t k, const uint8_t* panels,
                               int64_t panel_bytes, float* c, int64_t ldc);

// A family of micro-kernels: kernels[r - 1] handles r rows (r <= max_rows) and
// panels_for(r) panels, which divides kPanelGroup.
template <typename X>
struct KernelSet {
  const MicroKernelFn<X>* kernels;
  int max_rows;
  int (*panels_for)(int rows);
};

// Multiplies the tile just written, rows x cols at c (ldc apart), by the
// scales of its columns (8-bit weights: the kernels sum the codes' values).
inline void ScaleTile(float* c, int64_t ldc, int rows, int64_t cols, const float* scale) {
  for (int r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] *= scale[j];
  }
}

// Optional for RunTiles over 8-bit panels: a task with more than one row
// block widens its group's panels to bf16 once, into a per-thread buffer,
// and runs `wide` (the bf16 kernels) over them, instead of every row block
// widening them in registers again (prefill: 8 row blocks per task). Both
// ways give the same bf16 values and the same sums, so results stay
// bit-identical whatever m.
template <typename X>
struct PanelWidener {
  // dst: `count` bf16 panels [pairs rounded up to even][16][2], dst_panel
  // elements apart, from the 8-bit panels at src, src_panel bytes apart.
  void (*widen)(const uint8_t* src, int64_t src_panel, int64_t k, int count, uint16_t* dst, int64_t dst_panel);
  KernelSet<X> wide;
};

// col_scale (8-bit weights; else null) scales each output column by
// col_scale[col] after its tile is computed.
template <typename X>
void RunTiles(const KernelSet<X>& set, const X* x, int64_t ldx, int64_t m, const PackedMatrix& w,
              float* y, ThreadPool& pool, const float* col_scale = nullptr,
              const PanelWidener<X>* widener = nullptr) {
  const int64_t n = w.n(), k = w.k();
  const int64_t panel_bytes = w.panel_elems() * DTypeSize(w.dtype());
  // Packing pads the panels to a multiple of kPanelGroup.
  const int64_t groups = (w.num_panels() + kPanelGroup - 1) / kPanelGroup;
  // Row chunks bound the X rows a task streams; a multiple of max_rows.
  const int64_t chunk_rows = set.max_rows * std::max<int64_t>(1, 96 / set.max_rows);
  const int64_t chunks = (m + chunk_rows - 1) / chunk_rows;
  const uint8_t* base = static_cast<const uint8_t*>(w.panel(0));
  // Several column groups per task when groups are small (lm_head of a
  // narrow model: 8 KiB each): a task then streams a long contiguous run of
  // weights (the hardware prefetcher follows it) and the shared task counter
  // is bumped far less often. Enough tasks remain for load balance.
  const int64_t group_bytes = kPanelGroup * panel_bytes;
  const int64_t min_tasks = int64_t{8} * pool.num_threads();
  const int64_t groups_per_task = std::max<int64_t>(
      1, std::min((int64_t{128} << 10) / group_bytes, groups / min_tasks));
  const int64_t group_tasks = (groups + groups_per_task - 1) / groups_per_task;
  pool.ParallelFor(group_tasks * chunks, m * n * k, [&](int64_t task, int) {
    const int64_t chunk = task / group_tasks;
    const int64_t group_begin = task % group_tasks * groups_per_task;
    const int64_t group_end = std::min(groups, group_begin + groups_per_task);
    const int64_t row_end = std::min(m, (chunk + 1) * chunk_rows);
    // Room for the widest tile: every kernel's rows * panels <= 12 * 4.
    alignas(64) float tmp[12 * kPanelGroup * kPanelWidth];
    const bool widen = widener != nullptr && row_end - chunk * chunk_rows > set.max_rows;
    const KernelSet<X>& kernels = widen ? widener->wide : set;
    // The widened group: kPanelGroup bf16 panels of an even number of pairs.
    const int64_t wide_panel = ((k + 1) / 2 + 1) / 2 * 2 * 2 * kPanelWidth;
    thread_local std::vector<uint16_t> wide_buffer;
    if (widen && wide_buffer.size() < static_cast<size_t>(kPanelGroup * wide_panel)) {
      wide_buffer.resize(kPanelGroup * wide_panel);
    }
    for (int64_t group = group_begin; group < group_end; ++group) {
      const int64_t col0 = group * kPanelGroup * kPanelWidth;
      const bool partial = col0 + kPanelGroup * kPanelWidth > n;
      const uint8_t* group_panels = base + group * kPanelGroup * panel_bytes;
      int64_t stride = panel_bytes;
      if (widen) {
        widener->widen(group_panels, panel_bytes, k, kPanelGroup, wide_buffer.data(), wide_panel);
        group_panels = reinterpret_cast<const uint8_t*>(wide_buffer.data());
        stride = wide_panel * 2;
      }
      for (int64_t row = chunk * chunk_rows; row < row_end; row += set.max_rows) {
        const int rows = static_cast<int>(std::min<int64_t>(set.max_rows, row_end - row));
        const int step = kernels.panels_for(rows);
        const MicroKernelFn<X> kernel = kernels.kernels[rows - 1];
        for (int p = 0; p < kPanelGroup; p += step) {
          const int64_t col = col0 + p * kPanelWidth;
          if (col >= n) break;
          const uint8_t* panels = group_panels + p * stride;
          const int64_t panel_bytes = stride;
          if (!partial) {
            kernel(x + row * ldx, ldx, k, panels, panel_bytes, y + row * n + col, n);
            if (col_scale) ScaleTile(y + row * n + col, n, rows, step * kPanelWidth, col_scale + col);
          } else {
            const int64_t ldc = step * kPanelWidth;
            kernel(x + row * ldx, ldx, k, panels, panel_bytes, tmp, ldc);
            const int64_t cols = std::min<int64_t>(ldc, n - col);
            if (col_scale) ScaleTile(tmp, ldc, rows, cols, col_scale + col);
            for (int r = 0; r < rows; ++r) {
              std::memcpy(y + (row + r) * n + col, tmp + r * ldc, cols * sizeof(float));
            }
          }
        }
      }
    }
  });
}

}  // namespace floe::cpu::internal
