#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/ops.h"

namespace floe::cpu {
namespace {
constexpr int kTokensPerTask = 16;
}  // namespace

void WriteKv(const KvLayer& kv, std::span<const AttentionSeq> seqs, const float* k,
             const float* v, int64_t stride) {
  const size_t head_bytes = kv.head_dim * sizeof(float);
  for (const AttentionSeq& seq : seqs) {
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      const int32_t pos = seq.start_pos + i;
      const int32_t block = seq.block_table[pos / kv.block_size];
      const int slot = pos % kv.block_size;
      const int64_t row = seq.first_row + i;
      for (int h = 0; h < kv.kv_heads; ++h) {
        std::memcpy(kv.k + kv.Offset(block, h, slot), k + row * stride + h * kv.head_dim, head_bytes);
        std::memcpy(kv.v + kv.Offset(block, h, slot), v + row * stride + h * kv.head_dim, head_bytes);
      }
    }
  }
}

void PagedAttention(const float* q, int64_t q_stride, std::span<const AttentionSeq> seqs,
                    const KvLayer& kv, int num_heads, float scale, float* out,
                    int64_t out_stride, float* scratch, int64_t scratch_per_thread,
                    ThreadPool& pool) {
  // Tasks: (sequence, head, chunk of kTokensPerTask tokens), sequence-major.
  int64_t total = 0, work = 0;
  for (const AttentionSeq& seq : seqs) {
    total += static_cast<int64_t>(num_heads) * ((seq.num_tokens + kTokensPerTask - 1) / kTokensPerTask);
    work += static_cast<int64_t>(seq.num_tokens) * (seq.start_pos + seq.num_tokens) * num_heads * kv.head_dim * 2;
  }
  const int group = num_heads / kv.kv_heads;
  const int hd = kv.head_dim;
  pool.ParallelFor(total, work, [&](int64_t task, int thread) {
    size_t s = 0;
    for (;; ++s) {
      const int64_t n = static_cast<int64_t>(num_heads) *
                        ((seqs[s].num_tokens + kTokensPerTask - 1) / kTokensPerTask);
      if (task < n) break;
      task -= n;
    }
    const AttentionSeq& seq = seqs[s];
    const int head = static_cast<int>(task % num_heads);
    const int32_t chunk = static_cast<int32_t>(task / num_heads);
    const int kv_head = head / group;
    float* scores = scratch + thread * scratch_per_thread;
    const int32_t first = chunk * kTokensPerTask;
    const int32_t last = std::min(seq.num_tokens, first + kTokensPerTask);
    for (int32_t i = first; i < last; ++i) {
      const int64_t row = seq.first_row + i;
      const float* qh = q + row * q_stride + head * hd;
      const int32_t ctx = seq.start_pos + i + 1;
      float max = -std::numeric_limits<float>::infinity();
      for (int32_t j = 0; j < ctx; ++j) {
        const int32_t block = seq.block_table[j / kv.block_size];
        const float sc = Dot(qh, kv.k + kv.Offset(block, kv_head, j % kv.block_size), hd) * scale;
        scores[j] = sc;
        max = std::max(max, sc);
      }
      const float sum = ExpMinusMax(scores, max, ctx);
      float* o = out + row * out_stride + head * hd;
      std::memset(o, 0, hd * sizeof(float));
      for (int32_t j = 0; j < ctx; ++j) {
        const int32_t block = seq.block_table[j / kv.block_size];
        ScaleMulAdd(o, 1.0f, scores[j], kv.v + kv.Offset(block, kv_head, j % kv.block_size), hd);
      }
      Scale(o, 1.0f / sum, hd);
    }
  });
}

}  // namespace floe::cpu
