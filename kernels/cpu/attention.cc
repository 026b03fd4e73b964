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

// A vector of cache elements widened to f32, exactly: bf16 bits shifted into
// the high half; e4m3 sign, exponent and mantissa moved to f32's places (an
// f32 with exponent bias 127 where e4m3's is 7, so times 2^120; e4m3
// subnormals land on f32 subnormals, which the multiply scales exactly).
template <class T>
HWY_INLINE hn::Vec<DF> LoadKv(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<uint32_t, DF> d32;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
  } else {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<uint32_t, DF> d32;
    const auto x = hn::PromoteTo(d32, hn::LoadU(d8, p));
    const auto bits = hn::Or(hn::ShiftLeft<24>(hn::And(x, hn::Set(d32, 0x80u))),
                             hn::ShiftLeft<20>(hn::And(x, hn::Set(d32, 0x7fu))));
    return hn::Mul(hn::BitCast(df, bits), hn::Set(df, 0x1p120f));
  }
}

template <class T>
HWY_INLINE float KvScalar(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return Bf16ToF32(x);
  } else {
    return F8E4M3ToF32(x);
  }
}

// G query heads of one token (q: G rows of head_dim floats, contiguous; out
// likewise) over the keys of their kv head at cache positions 0..split-1 and
// then tail[0..tail_len) (a tree token's root path; tail_len == 0 for a
// causal query): scores, softmax, weighted V. Each key and value row is
// loaded (and widened) once for all G queries: the grouped-query heads share
// it. Every query's arithmetic is the same whatever G and whatever its batch
// (a token's output does not depend on either), and the same for every
// element type T (float, bf16 bits, e4m3 bits): the cache's scales multiply
// the score scale and the final 1/sum, so with scales of 1 (or powers of
// two) a narrow cache equals an f32 cache holding its values, bit for bit.
// scores: G rows of `score_stride` floats.
template <class T, int G>
HWY_INLINE void AttendGroupT(const float* HWY_RESTRICT q, const KvLayer& kv, const int32_t* block_table,
                             int kv_head, int32_t split, const int32_t* tail, int32_t tail_len, float scale,
                             float* HWY_RESTRICT scores, int64_t score_stride, float* HWY_RESTRICT out) {
  const T* const kcache = static_cast<const T*>(kv.k);
  const T* const vcache = static_cast<const T*>(kv.v);
  const auto offset = [&](int32_t p) {
    return kv.Offset(block_table[p / kv.block_size], kv_head, p % kv.block_size);
  };
  // Calls fn(j, cache offset of key j) for every key j in order; the two runs
  // are separate loops, so the causal run pays nothing for trees.
  const auto for_keys = [&](const auto& fn) {
    for (int32_t j = 0; j < split; ++j) fn(j, offset(j));
    for (int32_t t = 0; t < tail_len; ++t) fn(split + t, offset(tail[t]));
  };
  const int32_t ctx = split + tail_len;
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  const int hd = kv.head_dim;
  const int64_t vec_end = hd / lanes * lanes;
  const float qk_scale = scale * kv.k_scale;
  float max[G];
  for (int g = 0; g < G; ++g) max[g] = -std::numeric_limits<float>::infinity();
  for_keys([&](int32_t j, int64_t key) {
    const T* k = kcache + key;
    hn::Vec<DF> a0[G], a1[G];
    for (int g = 0; g < G; ++g) a0[g] = a1[g] = hn::Zero(df);
    int64_t d = 0;
    for (; d + 2 * lanes <= vec_end; d += 2 * lanes) {
      const auto k0 = LoadKv(df, k + d), k1 = LoadKv(df, k + d + lanes);
      for (int g = 0; g < G; ++g) {
        a0[g] = hn::MulAdd(hn::LoadU(df, q + g * hd + d), k0, a0[g]);
        a1[g] = hn::MulAdd(hn::LoadU(df, q + g * hd + d + lanes), k1, a1[g]);
      }
    }
    for (; d < vec_end; d += lanes) {
      const auto k0 = LoadKv(df, k + d);
      for (int g = 0; g < G; ++g) a0[g] = hn::MulAdd(hn::LoadU(df, q + g * hd + d), k0, a0[g]);
    }
    for (int g = 0; g < G; ++g) {
      float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[g], a1[g])));
      // Tails fused explicitly: left to -ffp-contract, the element types'
      // instantiations could round them differently.
      for (int64_t e = d; e < hd; ++e) dot = std::fma(q[g * hd + e], KvScalar(k[e]), dot);
      const float s = dot * qk_scale;
      scores[g * score_stride + j] = s;
      max[g] = std::max(max[g], s);
    }
  });
  float inv[G];
  for (int g = 0; g < G; ++g) {
    float* sc = scores + g * score_stride;
    const auto vmax = hn::Set(df, max[g]);
    auto vsum = hn::Zero(df);
    int32_t j = 0;
    for (; j + lanes <= ctx; j += lanes) {
      const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, sc + j), vmax));
      hn::StoreU(e, df, sc + j);
      vsum = hn::Add(vsum, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
    for (; j < ctx; ++j) {
      sc[j] = std::exp(sc[j] - max[g]);
      sum += sc[j];
    }
    inv[g] = 1.0f / sum * kv.v_scale;
  }
  // V: kChunk vectors of each query's output stay in registers across all
  // keys (each output element is one fused chain over the keys in order,
  // however the columns are chunked).
  constexpr int kRegs = HWY_MAX_BYTES >= 64 ? 16 : 8;
  constexpr int kChunk = kRegs / G > 0 ? kRegs / G : 1;
  for (int64_t d0 = 0; d0 < vec_end; d0 += kChunk * lanes) {
    const int nvec = static_cast<int>(std::min<int64_t>(kChunk, (vec_end - d0) / lanes));
    hn::Vec<DF> acc[G][kChunk];
    for (int g = 0; g < G; ++g) {
      for (int c = 0; c < kChunk; ++c) acc[g][c] = hn::Zero(df);
    }
    for_keys([&](int32_t jj, int64_t key) {
      const T* v = vcache + key + d0;
      hn::Vec<DF> vv[kChunk];
      if (nvec == kChunk) {
#pragma GCC unroll 16
        for (int c = 0; c < kChunk; ++c) vv[c] = LoadKv(df, v + c * lanes);
        for (int g = 0; g < G; ++g) {
          const auto p = hn::Set(df, scores[g * score_stride + jj]);
#pragma GCC unroll 16
          for (int c = 0; c < kChunk; ++c) acc[g][c] = hn::MulAdd(p, vv[c], acc[g][c]);
        }
      } else {
        for (int c = 0; c < nvec; ++c) vv[c] = LoadKv(df, v + c * lanes);
        for (int g = 0; g < G; ++g) {
          const auto p = hn::Set(df, scores[g * score_stride + jj]);
          for (int c = 0; c < nvec; ++c) acc[g][c] = hn::MulAdd(p, vv[c], acc[g][c]);
        }
      }
    });
    for (int g = 0; g < G; ++g) {
      const auto vinv = hn::Set(df, inv[g]);
      for (int c = 0; c < nvec; ++c) hn::StoreU(hn::Mul(acc[g][c], vinv), df, out + g * hd + d0 + c * lanes);
    }
  }
  for (int64_t d = vec_end; d < hd; ++d) {
    float acc[G] = {};
    for_keys([&](int32_t jj, int64_t key) {
      const float x = KvScalar(vcache[key + d]);
      for (int g = 0; g < G; ++g) acc[g] = std::fma(scores[g * score_stride + jj], x, acc[g]);
    });
    for (int g = 0; g < G; ++g) out[g * hd + d] = acc[g] * inv[g];
  }
}

// num_q query heads of one token, in passes of up to kMaxGroup.
template <class T>
HWY_INLINE void AttendHeadsT(const float* HWY_RESTRICT q, int num_q, const KvLayer& kv, const int32_t* block_table,
                             int kv_head, int32_t split, const int32_t* tail, int32_t tail_len, float scale,
                             float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  const int32_t ctx = split + tail_len;
  const int hd = kv.head_dim;
  int g = 0;
  for (; g + 4 <= num_q; g += 4) {
    AttendGroupT<T, 4>(q + g * hd, kv, block_table, kv_head, split, tail, tail_len, scale, scores, ctx, out + g * hd);
  }
  if (g + 2 <= num_q) {
    AttendGroupT<T, 2>(q + g * hd, kv, block_table, kv_head, split, tail, tail_len, scale, scores, ctx, out + g * hd);
    g += 2;
  }
  if (g < num_q) {
    AttendGroupT<T, 1>(q + g * hd, kv, block_table, kv_head, split, tail, tail_len, scale, scores, ctx, out + g * hd);
  }
}

void AttendHeadsF32(const float* HWY_RESTRICT q, int num_q, const KvLayer& kv, const int32_t* block_table,
                    int kv_head, int32_t split, const int32_t* tail, int32_t tail_len, float scale,
                    float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  AttendHeadsT<float>(q, num_q, kv, block_table, kv_head, split, tail, tail_len, scale, scores, out);
}

void AttendHeadsBf16(const float* HWY_RESTRICT q, int num_q, const KvLayer& kv, const int32_t* block_table,
                     int kv_head, int32_t split, const int32_t* tail, int32_t tail_len, float scale,
                     float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  AttendHeadsT<uint16_t>(q, num_q, kv, block_table, kv_head, split, tail, tail_len, scale, scores, out);
}

void AttendHeadsFp8(const float* HWY_RESTRICT q, int num_q, const KvLayer& kv, const int32_t* block_table,
                    int kv_head, int32_t split, const int32_t* tail, int32_t tail_len, float scale,
                    float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  AttendHeadsT<uint8_t>(q, num_q, kv, block_table, kv_head, split, tail, tail_len, scale, scores, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace floe::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace floe::cpu {
namespace {
constexpr int kTokensPerTask = 16;
}  // namespace

HWY_EXPORT(AttendHeadsF32);
HWY_EXPORT(AttendHeadsBf16);
HWY_EXPORT(AttendHeadsFp8);

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
        if (kv.dtype == KvDtype::kBf16) {
          uint16_t* kd = static_cast<uint16_t*>(kv.k) + at;
          uint16_t* vd = static_cast<uint16_t*>(kv.v) + at;
          for (int d = 0; d < hd; ++d) {
            kd[d] = F32ToBf16(ks[d]);
            vd[d] = F32ToBf16(vs[d]);
          }
          continue;
        }
        uint8_t* kd = static_cast<uint8_t*>(kv.k) + at;
        uint8_t* vd = static_cast<uint8_t*>(kv.v) + at;
        for (int d = 0; d < hd; ++d) {
          kd[d] = F32ToF8E4M3(ks[d] / kv.k_scale);
          vd[d] = F32ToF8E4M3(vs[d] / kv.v_scale);
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
  // Tasks: (sequence, slice of a kv head's query heads, chunk of
  // kTokensPerTask tokens), sequence-major. A slice is the whole group unless
  // that leaves threads idle (decode of a short batch); a query's arithmetic
  // does not depend on the slicing.
  const int group = num_heads / kv.kv_heads;
  const int hd = kv.head_dim;
  int64_t chunks = 0, work = 0;
  for (const AttentionSeq& seq : seqs) {
    chunks += (seq.num_tokens + kTokensPerTask - 1) / kTokensPerTask;
    work += static_cast<int64_t>(seq.num_tokens) * (seq.start_pos + seq.num_tokens) * num_heads * hd * 2;
  }
  int per_task = group;
  while (per_task % 2 == 0 && chunks * (num_heads / per_task) < pool.num_threads()) per_task /= 2;
  const int slices = num_heads / per_task;
  // The chosen target's function for this cache's element type.
  const auto attend = kv.dtype == KvDtype::kF32    ? &HWY_DYNAMIC_DISPATCH(AttendHeadsF32)
                      : kv.dtype == KvDtype::kBf16 ? &HWY_DYNAMIC_DISPATCH(AttendHeadsBf16)
                                                   : &HWY_DYNAMIC_DISPATCH(AttendHeadsFp8);
  pool.ParallelFor(chunks * slices, work, [&](int64_t task, int thread) {
    size_t s = 0;
    for (;; ++s) {
      const int64_t n = slices * ((seqs[s].num_tokens + kTokensPerTask - 1) / kTokensPerTask);
      if (task < n) break;
      task -= n;
    }
    const AttentionSeq& seq = seqs[s];
    const int head = static_cast<int>(task % slices) * per_task;
    const int32_t chunk = static_cast<int32_t>(task / slices);
    const int kv_head = head / group;
    float* scores = scratch + thread * scratch_per_thread;
    const int32_t first = chunk * kTokensPerTask;
    const int32_t last = std::min(seq.num_tokens, first + kTokensPerTask);
    for (int32_t i = first; i < last; ++i) {
      const int64_t row = seq.first_row + i;
      const float* qh = q + row * q_stride + head * hd;
      float* o = out + row * out_stride + head * hd;
      if (seq.tree_paths) {
        const int32_t begin = seq.tree_path_begin[i];
        const int32_t len = seq.tree_path_begin[i + 1] - begin;
        attend(qh, per_task, kv, seq.block_table, kv_head, seq.start_pos, seq.tree_paths + begin, len, scale,
               scores, o);
      } else {
        attend(qh, per_task, kv, seq.block_table, kv_head, seq.start_pos + i + 1, nullptr, 0, scale, scores, o);
      }
    }
  });
}

}  // namespace floe::cpu
#endif  // HWY_ONCE
