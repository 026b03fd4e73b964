// The CUDA kernels of the Llama forward pass (services/worker/model), each
// the device twin of a kernels/cpu op, callable from plain C++ (no CUDA
// headers needed by callers).
//
// Layers, as FlashInfer's: a __global__ kernel (in the .cu), a launcher here
// on raw device pointers that checks its arguments and returns 0
// (cudaSuccess) or a cudaError_t code (see ErrorString in rmsnorm.h), and
// the backend (services/worker/backend/cuda_backend.h), which validates a
// step before it dispatches. Every launch is asynchronous on `stream` (a
// cudaStream_t; nullptr: the default stream); none allocates.
//
// Numerics: f32 activations, as the CPU backend's. A bf16 matrix's input
// is rounded to bf16 (F32ToBf16) before its GEMM, as the CPU kernels round
// it; the GEMMs accumulate in f32.
#pragma once

#include <cstdint>

namespace floe::cuda {

enum class Dtype : int32_t { kF32 = 0, kBf16 = 1 };

// The number of CUDA devices this process sees (0 when the driver or the
// runtime is missing: the caller falls back to the CPU).
int DeviceCount();

// out[r, :] = table[tokens[r], :] widened to f32; table [vocab, hidden].
int EmbedRows(const void* table, Dtype dtype, const int32_t* tokens, int rows, int hidden, float* out,
              void* stream);

// x[r] += delta[r]; out[r] = RMSNorm(x[r]) * weight (out may be delta).
int AddRmsNormF32(float* x, const float* delta, const float* weight, float eps, int rows, int cols, float* out,
                  void* stream);

// out[i] = RMSNorm(in[index[i]]) * weight, i < rows.
int GatherRmsNormF32(const float* in, const int64_t* index, const float* weight, float eps, int rows, int cols,
                     float* out, void* stream);

// Each row holds `groups` [gate | up] groups, each 2 * inter wide; group g's
// silu(gate) * up lands at g * inter (in place, groups in order).
int SiluMulF32(float* data, int rows, int groups, int inter, void* stream);

// The MLP's bf16 path, as vLLM keeps it: each row's `groups` [gate | up]
// groups of bf16 (the gate_up GEMM's bf16 output; row r at gate_up + r * ld,
// each group 2 * inter wide) to group g's silu(gate) * up, computed in f32
// and rounded to bf16 (nearest even) at out[r * groups * inter + g * inter]:
// the down GEMM's input as it is.
int SiluMulBf16(const uint16_t* gate_up, int64_t ld, int rows, int groups, int inter, uint16_t* out, void* stream);

// x += delta, n floats.
int AddF32(float* x, const float* delta, int64_t n, void* stream);

// out[r, c] = bf16(in[r * in_stride + c]) for c < cols (round to nearest
// even, as the CPU's conversion); out is [rows, cols] bf16 (uint16 bits).
int F32ToBf16(const float* in, int64_t in_stride, int rows, int cols, uint16_t* out, void* stream);

// On every row of `qkv` ([q heads | k heads | v heads], each head_dim wide):
// + bias (the row's width; null: none), per-head RMSNorm of q and k with
// q_norm / k_norm (head_dim each; null: none), then RoPE (rotate_half) of q
// and k with the row's cos / sin (head_dim / 2 each, rows of `cos`, `sin`).
int PrepareQk(float* qkv, int rows, int heads, int kv_heads, int head_dim, const float* bias, const float* q_norm,
              const float* k_norm, float eps, const float* cos, const float* sin, void* stream);

// RoPE of `heads` heads at the start of each row (row r at x + r * stride).
int ApplyRope(float* x, int64_t stride, int rows, int heads, int head_dim, const float* cos, const float* sin,
              void* stream);

// The KV cache's element type, as cpu::KvDtype: f32, bf16 (written rounded
// to nearest even), or fp8 e4m3fn codes of K / k_scale and V / v_scale
// (nearest even, saturated at 448: vLLM's fp8_e4m3). Attention widens each
// element exactly to f32 (the CPU's bit manipulation) and computes in f32.
enum class KvDtype : int32_t { kF32 = 0, kBf16 = 1, kFp8E4m3 = 2 };
inline int KvElementBytes(KvDtype d) { return d == KvDtype::kF32 ? 4 : d == KvDtype::kBf16 ? 2 : 1; }

// One layer's paged KV cache: K and V each [num_blocks][kv_heads][block_size][head_dim]
// of `dtype`, the CPU backend's layout (kernels/cpu/attention.h).
struct PagedKv {
  void* k = nullptr;
  void* v = nullptr;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  KvDtype dtype = KvDtype::kF32;
  float k_scale = 1.0f;  // fp8 only
  float v_scale = 1.0f;
};

// A step's attention layout on the device, per row r of the step:
//   write_pos[r]   the cache position its K and V go to;
//   table[r]       the offset in `tables` of its sequence's block table;
//   context[r]     it attends to cache positions [0, context[r]) ...
//   path_begin[r], path_end[r]  ... then to paths[path_begin[r], path_end[r])
//                  (a tree token's ancestors and itself, root first; empty
//                  for a chain token, whose context runs to itself).
// The same keys, in the same order, as cpu::PagedAttention's.
//   subset         PagedAttention attends only these rows (null: every row;
//                  the others' outputs are left alone: PrefillAttention's)
struct StepLayout {
  int rows = 0;
  const int32_t* write_pos = nullptr;
  const int32_t* table = nullptr;
  const int32_t* context = nullptr;
  const int32_t* path_begin = nullptr;
  const int32_t* path_end = nullptr;
  const int32_t* tables = nullptr;
  const int32_t* paths = nullptr;
  const int32_t* subset = nullptr;
  int subset_rows = 0;
};

// Stores every row's k and v (kv_heads * head_dim each, row r at
// k + r * stride) in its cache slot.
int WriteKv(const PagedKv& kv, const StepLayout& step, const float* k, const float* v, int64_t stride,
            void* stream);

// out[r, h] = softmax(q[r, h] . K^T * scale) V over row r's keys (see
// StepLayout); q head h reads KV head h / (num_heads / kv_heads). One block
// per (row, head, split); online softmax, so any context length fits.
// splits > 1 (split-K, for few rows over long contexts: a batch-1 decode
// has only num_heads blocks otherwise) divides each row's keys into that
// many parts, merged by a second kernel through `workspace`, at least
// PagedAttentionWorkspace(...) floats; splits = 1 needs none.
inline constexpr int kMaxSplits = 64;
int PagedAttention(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads,
                   float scale, float* out, int64_t out_stride, int splits, float* workspace,
                   int64_t workspace_floats, void* stream);
int64_t PagedAttentionWorkspace(int rows, int num_heads, int head_dim, int splits);

// Attention of a prompt's rows, flash-style: one block per (tile, q head)
// holds up to kPrefillTileRows query rows and walks the keys in tiles of
// 32 through shared memory with an online softmax, so each key is read
// once per tile rather than once per row. tiles holds [first_row, rows] per
// tile: consecutive chain rows (empty paths) of one sequence. Output as
// PagedAttention's (to f32 rounding: the softmax is merged per key tile).
inline constexpr int kPrefillTileRows = 32;
inline constexpr int kMaxPrefillHeadDim = 128;
int PrefillAttention(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads,
                     float scale, float* out, int64_t out_stride, const int32_t* tiles, int num_tiles, void* stream);

// PrefillAttention on tensor cores, for bf16 and fp8 caches: FlashAttention-
// 2's tiling (64 query rows per block, 16 per warp, keys in tiles of 64),
// bf16 mma with f32 accumulation, the online softmax in f32. Q and the
// softmax weights P are rounded to bf16 before their products (as
// FlashAttention's bf16 kernels round them); the cache's values are bf16
// values already. Output within that rounding of PrefillAttention's (the
// bound is cuda_prefill_mma_test's). Tiles as PrefillAttention's, each of
// at most kMmaPrefillTileRows rows (rows past that are not computed: the
// device cannot say so). Needs sm_80 or later, head_dim a multiple of 16 up
// to 128, and the block's shared memory: PrefillAttentionMmaSupported says,
// on the current device.
inline constexpr int kMmaPrefillTileRows = 64;
bool PrefillAttentionMmaSupported(KvDtype dtype, int head_dim);
int PrefillAttentionMma(const float* q, int64_t q_stride, const StepLayout& step, const PagedKv& kv, int num_heads,
                        float scale, float* out, int64_t out_stride, const int32_t* tiles, int num_tiles,
                        void* stream);
// Its shared memory per block (110 KiB at head_dim 128).
int64_t PrefillAttentionMmaSharedBytes(int head_dim);

// Copies one token's KV per entry, entries in order, in every one of
// `arrays` arrays of `array_elements` elements of `dtype` from `cache` (each
// layer's K, then its V): copies holds [src_block, src_slot, dst_block,
// dst_slot] per entry.
int CopyKvSlots(void* cache, KvDtype dtype, int64_t array_elements, int arrays, int block_size, int kv_heads,
                int head_dim, const int32_t* copies, int num_copies, void* stream);

}  // namespace floe::cuda
