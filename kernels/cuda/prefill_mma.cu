// Prompt attention on tensor cores, for bf16 and fp8 KV caches
// (PrefillAttentionMma, kernels/cuda/model_kernels.h).
//
// FlashAttention-2's loop, one block of 4 warps per (tile of up to 64 query
// rows, q head), each warp owning 16 of the rows: per tile of 64 keys, K and
// V widened to bf16 into shared memory (exact: bf16 and e4m3 values are
// bf16 values), S = Q K^T on bf16 mma (WMMA 16x16x16, f32 accumulation),
// the online softmax of the warp's rows in f32, then O += P V on bf16 mma.
// Unlike FlashAttention-2 the output accumulators live in shared memory, not
// in registers: WMMA's fragment layout is opaque, so a row's rescale by its
// new max goes through memory (one f32 read and write of O per key tile).
// A warp whose rows all end before a key tile skips it (the causal
// triangle).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/kv_access.cuh"
#include "kernels/cuda/model_kernels.h"

namespace floe::cuda {
namespace {

using internal::Invalid;
using internal::Launched;
using internal::Offset;
using internal::ValidKv;
using internal::ValidStep;
using internal::Widen;

constexpr int kRows = kMmaPrefillTileRows;  // 16 per warp
constexpr int kWarps = kRows / 16;
constexpr int kKeys = 64;  // keys per tile
constexpr int kMaxHeadDim = 128;

// Shared memory, in bytes from the start, each array 128-byte aligned. Row
// strides are padded (16 bytes for bf16, 16 for f32) so that a fragment's
// 16 rows fall in different banks; every stride keeps WMMA's 32-byte
// alignment of a 16-row fragment.
struct Smem {
  int ldh, lds, ldp, ldo;  // elements: Q/K/V (bf16), S (f32), P (bf16), O (f32)
  size_t q, k, v, s, p, o, total;
};

__host__ __device__ constexpr size_t Align128(size_t x) { return (x + 127) / 128 * 128; }

__host__ __device__ Smem SmemFor(int hd) {
  Smem m{};
  m.ldh = hd + 8;
  m.lds = kKeys + 4;
  m.ldp = kKeys + 8;
  m.ldo = hd + 4;
  size_t at = 0;
  m.q = at, at += Align128(size_t{kRows} * m.ldh * 2);
  m.k = at, at += Align128(size_t{kKeys} * m.ldh * 2);
  m.v = at, at += Align128(size_t{kKeys} * m.ldh * 2);
  m.s = at, at += Align128(size_t{kRows} * m.lds * 4);
  m.p = at, at += Align128(size_t{kRows} * m.ldp * 2);
  m.o = at, at += Align128(size_t{kRows} * m.ldo * 4);
  m.total = at;
  return m;
}

__device__ __forceinline__ __nv_bfloat16 AsBf16(uint16_t x) { return __ushort_as_bfloat16(x); }
__device__ __forceinline__ __nv_bfloat16 AsBf16(uint8_t x) { return __float2bfloat16_rn(Widen(x)); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
namespace wmma = nvcuda::wmma;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// acc += A B over `steps` slices 16 deep: A's 16 rows row-major at `a`
// (stride lda), slice k at a + 16k; B's slice k at b + k * b_step (stride
// ldb, laid out as BLayout says).
template <class BLayout>
__device__ __forceinline__ void MmaSlices(Accumulator& acc, const __nv_bfloat16* a, int lda, const __nv_bfloat16* b,
                                          int ldb, int b_step, int steps) {
  for (int k = 0; k < steps; ++k) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, BLayout> fb;
    wmma::load_matrix_sync(fa, a + k * 16, lda);
    wmma::load_matrix_sync(fb, b + k * b_step, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}
#endif

// `scale` includes k_scale; the output is multiplied by v_scale once.
template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    PrefillMmaKernel(const float* __restrict__ q, int64_t q_stride, StepLayout step, PagedKv kv, int group,
                     float scale, float* __restrict__ out, int64_t out_stride, const int32_t* __restrict__ tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const int hd = kv.head_dim;
  const Smem L = SmemFor(hd);
  __nv_bfloat16* const qs = reinterpret_cast<__nv_bfloat16*>(smem + L.q);
  __nv_bfloat16* const ks = reinterpret_cast<__nv_bfloat16*>(smem + L.k);
  __nv_bfloat16* const vs = reinterpret_cast<__nv_bfloat16*>(smem + L.v);
  float* const ss = reinterpret_cast<float*>(smem + L.s);
  __nv_bfloat16* const ps = reinterpret_cast<__nv_bfloat16*>(smem + L.p);
  float* const os = reinterpret_cast<float*>(smem + L.o);

  const int first = tiles[2 * blockIdx.x], count = tiles[2 * blockIdx.x + 1];
  const int head = blockIdx.y, kv_head = head / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t* table = step.tables + step.table[first];
  // The tile's keys (its rows' largest context), and the warp's.
  int keys = 0, warp_keys = 0;
  for (int i = 0; i < count; ++i) {
    const int c = step.context[first + i];
    keys = max(keys, c);
    if (i / 16 == warp) warp_keys = max(warp_keys, c);
  }
  // Q rounded to bf16 (rows past the tile: zero); O zeroed.
  for (int e = threadIdx.x; e < kRows * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    const float x = r < count ? q[(first + r) * q_stride + static_cast<int64_t>(head) * hd + d] : 0.0f;
    qs[r * L.ldh + d] = __float2bfloat16_rn(x);
    os[r * L.ldo + d] = 0.0f;
  }
  // Lanes 2i and 2i + 1 of a warp share its row i: each takes every other
  // score and every other dimension (interleaved, so that the pair's reads
  // fall in different banks); both keep the row's max and sum.
  const int r = warp * 16 + lane / 2, half = lane % 2;
  const bool active = r < count;
  const int context = active ? step.context[first + r] : 0;
  float m = -INFINITY, l = 0.0f;
  for (int k0 = 0; k0 < keys; k0 += kKeys) {
    __syncthreads();  // every warp is done with the last tile's K and V (and Q and O are written)
    for (int e = threadIdx.x; e < kKeys * hd; e += blockDim.x) {
      const int c = e / hd, d = e % hd, pos = k0 + c;
      __nv_bfloat16 kx = __float2bfloat16_rn(0.0f), vx = kx;  // past the keys: 0, not stale NaN
      if (pos < keys) {
        const int64_t at = Offset(kv, table[pos / kv.block_size], kv_head, pos % kv.block_size) + d;
        kx = AsBf16(static_cast<const T*>(kv.k)[at]);
        vx = AsBf16(static_cast<const T*>(kv.v)[at]);
      }
      ks[c * L.ldh + d] = kx;
      vs[c * L.ldh + d] = vx;
    }
    __syncthreads();
    if (k0 >= warp_keys) continue;  // none of the warp's rows reaches this tile (warp-uniform)
    // S = Q K^T over the warp's 16 rows; K row-major is K^T column-major
    // (its head_dim slices 16 elements apart).
    for (int cb = 0; cb < kKeys / 16; ++cb) {
      Accumulator acc;
      wmma::fill_fragment(acc, 0.0f);
      MmaSlices<wmma::col_major>(acc, qs + warp * 16 * L.ldh, L.ldh, ks + cb * 16 * L.ldh, L.ldh, 16, hd / 16);
      wmma::store_matrix_sync(ss + warp * 16 * L.lds + cb * 16, acc, L.lds, wmma::mem_row_major);
    }
    __syncwarp();
    // The online softmax of row r over this tile's 64 keys, 32 per lane.
    const float* srow = ss + r * L.lds;
    float tile_max = -INFINITY;
    for (int c = half; c < kKeys; c += 2) {
      if (active && k0 + c < context) tile_max = fmaxf(tile_max, srow[c] * scale);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float next = fmaxf(m, tile_max);
    // next is -inf only on a row past the tile's, or one none of whose keys
    // came yet: its weights are 0 and nothing is rescaled.
    const bool any = next != -INFINITY;
    const float correction = any ? expf(m - next) : 1.0f;  // 0 while m is -inf
    __nv_bfloat16* prow = ps + r * L.ldp;
    float sum = 0.0f;
    for (int c = half; c < kKeys; c += 2) {
      const bool key = active && k0 + c < context;
      const float p = key ? expf(srow[c] * scale - next) : 0.0f;
      sum += p;
      prow[c] = __float2bfloat16_rn(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * correction + sum;
    m = next;
    float* orow = os + r * L.ldo;
    if (correction != 1.0f) {
      for (int d = half; d < hd; d += 2) orow[d] *= correction;
    }
    __syncwarp();
    // O += P V over the warp's rows; V row-major is the right operand as is
    // (its key slices 16 rows apart).
    for (int ob = 0; ob < hd / 16; ++ob) {
      Accumulator acc;
      float* const o = os + warp * 16 * L.ldo + ob * 16;
      wmma::load_matrix_sync(acc, o, L.ldo, wmma::mem_row_major);
      MmaSlices<wmma::row_major>(acc, ps + warp * 16 * L.ldp, L.ldp, vs + ob * 16, L.ldh, 16 * L.ldh, kKeys / 16);
      wmma::store_matrix_sync(o, acc, L.ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (!active) return;
  float* o = out + (first + r) * out_stride + static_cast<int64_t>(head) * hd;
  const float* orow = os + r * L.ldo;
  for (int d = half; d < hd; d += 2) o[d] = l > 0.0f ? orow[d] * kv.v_scale / l : 0.0f;
#endif
}

template <class T>
int Launch(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads, float scale,
           float* out, int64_t out_stride, const int32_t* tiles, int num_tiles, cudaStream_t stream) {
  const size_t bytes = SmemFor(kv.head_dim).total;
  if (cudaError_t e = cudaFuncSetAttribute(PrefillMmaKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes));
      e != cudaSuccess) {
    cudaGetLastError();  // reported here, not again by the next launch's check
    return static_cast<int>(e);
  }
  PrefillMmaKernel<T><<<dim3(num_tiles, num_heads), kWarps * 32, bytes, stream>>>(
      q, q_stride, step, kv, num_heads / kv.kv_heads, scale * kv.k_scale, out, out_stride, tiles);
  return Launched();
}

}  // namespace

bool PrefillAttentionMmaSupported(KvDtype dtype, int head_dim) {
  if (dtype == KvDtype::kF32 || head_dim <= 0 || head_dim % 16 != 0 || head_dim > kMaxHeadDim) return false;
  // sm_80+ for bf16 mma, and room for the block's shared memory: 110 KiB at
  // head_dim 128 fits A100, H100 and H200, not the 99 KiB of sm_86/89/120.
  int device = 0, major = 0, smem = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error for the next launch's check
    return false;
  }
  return major >= 8 && static_cast<size_t>(smem) >= SmemFor(head_dim).total;
}

int64_t PrefillAttentionMmaSharedBytes(int head_dim) { return static_cast<int64_t>(SmemFor(head_dim).total); }

int PrefillAttentionMma(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads,
                        float scale, float* out, int64_t out_stride, const int32_t* tiles, int num_tiles,
                        void* stream) {
  if (!ValidKv(kv) || !ValidStep(step) || !q || !out || num_heads <= 0 || num_heads % kv.kv_heads != 0 ||
      kv.dtype == KvDtype::kF32 || kv.head_dim % 16 != 0 || kv.head_dim > kMaxHeadDim ||
      q_stride < num_heads * kv.head_dim || out_stride < num_heads * kv.head_dim || num_tiles < 0 ||
      (num_tiles > 0 && !tiles)) {
    return Invalid();
  }
  if (num_tiles == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  return kv.dtype == KvDtype::kBf16
             ? Launch<uint16_t>(q, q_stride, step, kv, num_heads, scale, out, out_stride, tiles, num_tiles, s)
             : Launch<uint8_t>(q, q_stride, step, kv, num_heads, scale, out, out_stride, tiles, num_tiles, s);
}

}  // namespace floe::cuda
