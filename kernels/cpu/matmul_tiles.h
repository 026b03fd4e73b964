// Internal to the matmul kernels: how Y = X . W^T is cut into tasks and
// register tiles, shared by the Highway kernels (matmul.cc) and the
// AVX512-BF16 dot-product kernels (matmul_bf16_dot.cc), which differ only in
// the micro-kernel and the activation type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace floe::cpu::internal {

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

template <typename X>
void RunTiles(const KernelSet<X>& set, const X* x, int64_t ldx, int64_t m, const PackedMatrix& w,
              float* y, ThreadPool& pool) {
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
    for (int64_t group = group_begin; group < group_end; ++group) {
      const int64_t col0 = group * kPanelGroup * kPanelWidth;
      const bool partial = col0 + kPanelGroup * kPanelWidth > n;
      for (int64_t row = chunk * chunk_rows; row < row_end; row += set.max_rows) {
        const int rows = static_cast<int>(std::min<int64_t>(set.max_rows, row_end - row));
        const int step = set.panels_for(rows);
        const MicroKernelFn<X> kernel = set.kernels[rows - 1];
        for (int p = 0; p < kPanelGroup; p += step) {
          const int64_t col = col0 + p * kPanelWidth;
          if (col >= n) break;
          const uint8_t* panels = base + (group * kPanelGroup + p) * panel_bytes;
          if (!partial) {
            kernel(x + row * ldx, ldx, k, panels, panel_bytes, y + row * n + col, n);
          } else {
            const int64_t ldc = step * kPanelWidth;
            kernel(x + row * ldx, ldx, k, panels, panel_bytes, tmp, ldc);
            const int64_t cols = std::min<int64_t>(ldc, n - col);
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
