#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention.h"

#include <type_traits>

#include "common/tensor/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace floe::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// A vector of cache elements widened to f32 (bf16 -> f32 is exact: the
// bits shifted into the high half).
template <class T>
HWY_INLINE hn::Vec<DF> LoadKv(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<uint32_t, DF> d32;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
  }
}

template <class T>
HWY_INLINE float KvScalar(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return Bf16ToF32(x);
  }
}

// One query over the keys of one kv head at cache positions 0..split-1 and
// then tail[0..tail_len) (a tree token's root path; tail_len == 0 for a causal
// query): scores, softmax, weighted V. The two runs of keys are separate
// loops, so the causal run pays nothing for trees.
// Everything per query, so a token's output does not depend on its batch;
// the same arithmetic for either element type (T: float or bf16 bits).
template <class T>
HWY_INLINE void AttendOneT(const float* HWY_RESTRICT qh, const KvLayer& kv, const int32_t* block_table,
                           int kv_head, int32_t split, const int32_t* tail, int32_t tail_len, float scale,
                           float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  const T* const kcache = static_cast<const T*>(kv.k);
  const T* const vcache = static_cast<const T*>(kv.v);
  const auto offset = [&](int32_t p) {
    return kv.Offset(block_table[p / kv.block_size], kv_head, p % kv.block_size);
  };
  // Calls fn(j, cache offset of key j) for every key j in order.
  const auto for_keys = [&](const auto& fn) {
    for (int32_t j = 0; j < split; ++j) fn(j, offset(j));
    for (int32_t t = 0; t < tail_len; ++t) fn(split + t, offset(tail[t]));
  };
  const int32_t ctx = split + tail_len;
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  const int hd = kv.head_dim;
  const int64_t vec_end = hd / lanes * lanes;
  float max = -std::numeric_limits<float>::infinity();
  for_keys([&](int32_t j, int64_t key) {
    const T* k = kcache + key;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df);
    int64_t d = 0;
    for (; d + 2 * lanes <= vec_end; d += 2 * lanes) {
      a0 = hn::MulAdd(hn::LoadU(df, qh + d), LoadKv(df, k + d), a0);
      a1 = hn::MulAdd(hn::LoadU(df, qh + d + lanes), LoadKv(df, k + d + lanes), a1);
    }
    for (; d < vec_end; d += lanes) a0 = hn::MulAdd(hn::LoadU(df, qh + d), LoadKv(df, k + d), a0);
    float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
    // Tails fused explicitly: left to -ffp-contract, the f32 and bf16
    // instantiations could round them differently.
    for (; d < hd; ++d) dot = std::fma(qh[d], KvScalar(k[d]), dot);
    scores[j] = dot * scale;
    max = std::max(max, scores[j]);
  });
  const auto vmax = hn::Set(df, max);
  auto vsum = hn::Zero(df);
  int32_t j = 0;
  for (; j + lanes <= ctx; j += lanes) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, scores + j), vmax));
    hn::StoreU(e, df, scores + j);
    vsum = hn::Add(vsum, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (; j < ctx; ++j) {
    scores[j] = std::exp(scores[j] - max);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  // V: up to kChunk vectors of the output stay in registers across all keys.
  constexpr int kChunk = HWY_MAX_BYTES >= 64 ? 8 : 4;
  for (int64_t d0 = 0; d0 < vec_end; d0 += kChunk * lanes) {
    const int nvec = static_cast<int>(std::min<int64_t>(kChunk, (vec_end - d0) / lanes));
    hn::Vec<DF> acc[kChunk];
    for (int c = 0; c < kChunk; ++c) acc[c] = hn::Zero(df);
    for_keys([&](int32_t jj, int64_t key) {
      const T* v = vcache + key + d0;
      const auto p = hn::Set(df, scores[jj]);
      if (nvec == kChunk) {
#pragma GCC unroll 8
        for (int c = 0; c < kChunk; ++c) acc[c] = hn::MulAdd(p, LoadKv(df, v + c * lanes), acc[c]);
      } else {
        for (int c = 0; c < nvec; ++c) acc[c] = hn::MulAdd(p, LoadKv(df, v + c * lanes), acc[c]);
      }
    });
    const auto vinv = hn::Set(df, inv);
    for (int c = 0; c < nvec; ++c) hn::StoreU(hn::Mul(acc[c], vinv), df, out + d0 + c * lanes);
  }
  for (int64_t d = vec_end; d < hd; ++d) {
    float acc = 0.0f;
    for_keys([&](int32_t jj, int64_t key) { acc = std::fma(scores[jj], KvScalar(vcache[key + d]), acc); });
    out[d] = acc * inv;
  }
}

void AttendOneF32(const float* HWY_RESTRICT qh, const KvLayer& kv, const int32_t* block_table, int kv_head,
                  int32_t split, const int32_t* tail, int32_t tail_len, float scale, float* HWY_RESTRICT scores,
                  float* HWY_RESTRICT out) {
  AttendOneT<float>(qh, kv, block_table, kv_head, split, tail, tail_len, scale, scores, out);
}

void AttendOneBf16(const float* HWY_RESTRICT qh, const KvLayer& kv, const int32_t* block_table, int kv_head,
                   int32_t split, const int32_t* tail, int32_t tail_len, float scale, float* HWY_RESTRICT scores,
                   float* HWY_RESTRICT out) {
  AttendOneT<uint16_t>(qh, kv, block_table, kv_head, split, tail, tail_len, scale, scores, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace floe::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace floe::cpu {
namespace {
constexpr int kTokensPerTask = 16;
}  // namespace

HWY_EXPORT(AttendOneF32);
HWY_EXPORT(AttendOneBf16);

void WriteKv(const KvLayer& kv, std::span<const AttentionSeq> seqs, const float* k,
             const float* v, int64_t stride) {
  const int hd = kv.head_dim;
  for (const AttentionSeq& seq : seqs) {
    for (int32_t i = 0; i < seq.num_tokens; ++i) {
      const int32_t pos = seq.start_pos + i;
      const int32_t block = seq.block_table[pos / kv.block_size];
      const int slot = pos % kv.block_size;
      const int64_t row = seq.first_row + i;
      for (int h = 0; h < kv.kv_heads; ++h) {
        const int64_t at = kv.Offset(block, h, slot);
        const float* ks = k + row * stride + h * hd;
        const float* vs = v + row * stride + h * hd;
        if (kv.dtype == KvDtype::kF32) {
          std::memcpy(static_cast<float*>(kv.k) + at, ks, hd * sizeof(float));
          std::memcpy(static_cast<float*>(kv.v) + at, vs, hd * sizeof(float));
          continue;
        }
        uint16_t* kd = static_cast<uint16_t*>(kv.k) + at;
        uint16_t* vd = static_cast<uint16_t*>(kv.v) + at;
        for (int d = 0; d < hd; ++d) {
          kd[d] = F32ToBf16(ks[d]);
          vd[d] = F32ToBf16(vs[d]);
        }
      }
    }
  }
}

void AppendTreePaths(std::span<const int32_t> parents, int32_t start_pos, std::vector<int32_t>& begin,
                     std::vector<int32_t>& paths) {
  // A token's path is its parent's path (built earlier: parents precede
  // children) and then itself.
  const size_t first = begin.size();
  for (size_t i = 0; i < parents.size(); ++i) {
    begin.push_back(static_cast<int32_t>(paths.size()));
    if (parents[i] >= 0) {
      const int32_t from = begin[first + parents[i]], to = begin[first + parents[i] + 1];
      for (int32_t p = from; p < to; ++p) {
        const int32_t ancestor = paths[p];  // a copy: push_back may reallocate
        paths.push_back(ancestor);
      }
    }
    paths.push_back(start_pos + static_cast<int32_t>(i));
  }
  begin.push_back(static_cast<int32_t>(paths.size()));
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
      float* o = out + row * out_stride + head * hd;
      const bool bf16 = kv.dtype == KvDtype::kBf16;
      if (seq.tree_paths) {
        const int32_t begin = seq.tree_path_begin[i];
        const int32_t len = seq.tree_path_begin[i + 1] - begin;
        if (bf16) {
          HWY_DYNAMIC_DISPATCH(AttendOneBf16)(qh, kv, seq.block_table, kv_head, seq.start_pos,
                                              seq.tree_paths + begin, len, scale, scores, o);
        } else {
          HWY_DYNAMIC_DISPATCH(AttendOneF32)(qh, kv, seq.block_table, kv_head, seq.start_pos,
                                             seq.tree_paths + begin, len, scale, scores, o);
        }
      } else if (bf16) {
        HWY_DYNAMIC_DISPATCH(AttendOneBf16)(qh, kv, seq.block_table, kv_head, seq.start_pos + i + 1, nullptr, 0,
                                            scale, scores, o);
      } else {
        HWY_DYNAMIC_DISPATCH(AttendOneF32)(qh, kv, seq.block_table, kv_head, seq.start_pos + i + 1, nullptr, 0,
                                           scale, scores, o);
      }
    }
  });
}

}  // namespace floe::cpu
#endif  // HWY_ONCE
