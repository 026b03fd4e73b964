// Causal GQA attention over a paged KV cache of f32, bf16 or fp8 (e4m3fn)
// elements.
//
// KV layout (per layer, K and V separate arrays):
//   [num_blocks][kv_heads][block_size][head_dim] (KvDtype elements)
// so one head's keys within a block are contiguous. Logical position p of a
// sequence lives in physical block block_table[p / block_size], slot
// p % block_size. A bf16 cache is written rounded to nearest even; an fp8
// cache holds x / k_scale (or v_scale) rounded to nearest even and saturated
// at +-448, as vLLM's fp8_e4m3 cache. Both are read widened exactly to f32,
// with the same arithmetic in the same order as an f32 cache, the scales
// multiplying the score scale and the softmax's 1/sum: attention over a
// narrow cache equals attention over an f32 cache holding its values
// (times scales of 1 or powers of two), bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace floe::cpu {

enum class KvDtype : uint8_t { kF32, kBf16, kFp8E4m3 };

inline size_t KvElementBytes(KvDtype dtype) {
  return dtype == KvDtype::kF32 ? 4 : dtype == KvDtype::kBf16 ? 2 : 1;
}
// vLLM's spelling (--kv-cache-dtype).
inline const char* KvDtypeName(KvDtype dtype) {
  return dtype == KvDtype::kF32 ? "f32" : dtype == KvDtype::kBf16 ? "bf16" : "fp8_e4m3";
}

struct KvLayer {
  void* k = nullptr;  // float*, uint16_t* (bf16 bits) or uint8_t* (e4m3 bits), as dtype says
  void* v = nullptr;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  KvDtype dtype = KvDtype::kF32;
  // fp8 only: a cached element times its scale is the value (1 elsewhere).
  float k_scale = 1.0f;
  float v_scale = 1.0f;

  // In elements.
  int64_t Offset(int32_t block, int head, int slot) const {
    return ((static_cast<int64_t>(block) * kv_heads + head) * block_size + slot) * head_dim;
  }
  size_t element_bytes() const { return KvElementBytes(dtype); }
};

// One sequence's new tokens: rows [first_row, first_row + num_tokens) of the
// activation matrices, in cache slots start_pos, start_pos + 1, ...
struct AttentionSeq {
  int64_t first_row = 0;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  const int32_t* block_table = nullptr;
  // Tree mask (null: causal), from AppendTreePaths: new token i attends to
  // positions [0, start_pos) and then to the cache positions
  // tree_paths[tree_path_begin[i] .. tree_path_begin[i + 1]) (its ancestors
  // and itself, root first), so its keys are exactly those a causal chain
  // along its root path would see, in the same order (results are
  // bit-identical to that chain's).
  const int32_t* tree_path_begin = nullptr;
  const int32_t* tree_paths = nullptr;
};

// The most new tokens a tree-masked sequence may have (its root paths take up
// to n(n+1)/2 positions).
inline constexpr int32_t kMaxTreeTokens = 1024;

// Query heads sharing a kv head are attended together, up to this many at a
// time, each with its own row of scores.
inline constexpr int kAttentionScratchRows = 4;

// Appends the root path of every token of a tree to `paths` (cache positions,
// root first) and where each starts to `begin` (parents.size() + 1 entries,
// indices into `paths`, the last one its end). parents[i] < i is the parent of
// new token i, -1 for token 0 (the only root); token i sits at start_pos + i.
// Built once per forward step: every layer reads the same paths.
void AppendTreePaths(std::span<const int32_t> parents, int32_t start_pos, std::vector<int32_t>& begin,
                     std::vector<int32_t>& paths);

// Stores the K and V rows (kv_heads * head_dim each; row r at k + r * stride)
// of every new token into the cache (bf16: rounded to nearest even).
void WriteKv(const KvLayer& kv, std::span<const AttentionSeq> seqs, const float* k,
             const float* v, int64_t stride);

// out[row, h*head_dim..] = softmax(q.K^T * scale) V for every new token, over
// keys 0..its own position (already in the cache, including this step's), or
// under a tree mask over the context and its ancestors (see AttentionSeq).
// q head h reads kv head h / (num_heads / kv_heads). `scratch` holds
// num_threads * scratch_per_thread floats, scratch_per_thread >=
// kAttentionScratchRows * the longest context of the batch.
void PagedAttention(const float* q, int64_t q_stride, std::span<const AttentionSeq> seqs,
                    const KvLayer& kv, int num_heads, float scale, float* out,
                    int64_t out_stride, float* scratch, int64_t scratch_per_thread,
                    ThreadPool& pool);

}  // namespace floe::cpu
