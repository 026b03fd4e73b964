// Each CPU kernel against a naive double-precision reference, at odd sizes,
// with f32, bf16, i8 and f8_e4m3 weights and several thread counts; bf16 and
// 8-bit matmuls on both of their code paths (AVX512_BF16 dot products where
// the CPU has them, and f32 FMAs, forced by restricting Highway to AVX2).
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "common/tensor/dtype.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"

namespace floe::cpu {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(ThreadPoolTest, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t tasks : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(tasks);
      for (int rep = 0; rep < 20; ++rep) {
        pool.ParallelFor(tasks, [&](int64_t t, int thread) {
          ASSERT_LT(thread, threads);
          hits[t].fetch_add(1);
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 20);
    }
  }
}

// An [n, k] weight matrix in `dtype` from normal random values: the stored
// bytes, the row scales of 8-bit types (absmax quantization, as quantizers
// write them), and the exact value each element stands for.
struct TestWeights {
  DType dtype;
  int64_t n, k;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  std::vector<double> value;

  TestWeights(DType d, int64_t rows, int64_t cols, uint32_t seed) : dtype(d), n(rows), k(cols) {
    const std::vector<float> wf = Random(n * k, seed);
    bytes.resize(n * k * DTypeSize(dtype));
    value.resize(n * k);
    scales.assign(n, 1.0f);
    for (int64_t r = 0; r < n; ++r) {
      float absmax = 0;
      for (int64_t c = 0; c < k; ++c) absmax = std::max(absmax, std::abs(wf[r * k + c]));
      if (IsQuantized(dtype)) scales[r] = absmax > 0 ? absmax / (dtype == DType::kI8 ? 127.0f : 448.0f) : 1.0f;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t i = r * k + c;
        const float w = wf[i];
        switch (dtype) {
          case DType::kF32: std::memcpy(&bytes[i * 4], &w, 4); value[i] = w; break;
          case DType::kBF16: {
            const uint16_t b = F32ToBf16(w);
            std::memcpy(&bytes[i * 2], &b, 2);
            value[i] = Bf16ToF32(b);
            break;
          }
          case DType::kI8: {
            const int8_t q = static_cast<int8_t>(std::clamp(std::nearbyint(w / scales[r]), -128.0f, 127.0f));
            bytes[i] = static_cast<uint8_t>(q);
            value[i] = static_cast<double>(q) * scales[r];
            break;
          }
          case DType::kF8E4M3: {
            // Every eighth weight tiny, so subnormal codes occur.
            const float v = c % 8 == 3 ? w * 1e-4f : w;
            bytes[i] = F32ToF8E4M3(v / scales[r]);
            value[i] = static_cast<double>(F8E4M3ToF32(bytes[i])) * scales[r];
            break;
          }
          default: ADD_FAILURE() << "dtype";
        }
      }
    }
  }
  TensorView View() const {
    TensorView v{dtype, {n, k}, bytes.data()};
    if (IsQuantized(dtype)) v.row_scale = scales.data();
    return v;
  }
  // Rows [r0, r1) and columns [c0, c1) as a matrix of their own.
  TestWeights Block(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    TestWeights b = *this;
    const size_t elem = DTypeSize(dtype);
    b.n = r1 - r0;
    b.k = c1 - c0;
    b.bytes.assign(b.n * b.k * elem, 0);
    b.value.assign(b.n * b.k, 0);
    b.scales.assign(scales.begin() + r0, scales.begin() + r1);
    for (int64_t r = r0; r < r1; ++r) {
      std::memcpy(&b.bytes[(r - r0) * b.k * elem], &bytes[(r * k + c0) * elem], b.k * elem);
      for (int64_t c = c0; c < c1; ++c) b.value[(r - r0) * b.k + c - c0] = value[r * k + c];
    }
    return b;
  }
};

// Restricts Highway (and so the bf16 path) to AVX2 for the test's lifetime.
class ScopedAvx2Only {
 public:
  ScopedAvx2Only() { hwy::SetSupportedTargetsForTest(HWY_AVX2 | HWY_EMU128); }
  ~ScopedAvx2Only() { hwy::SetSupportedTargetsForTest(0); }
};

enum class Path { kBest, kAvx2 };

class MatmulTest : public ::testing::TestWithParam<std::tuple<DType, int, Path>> {};

TEST_P(MatmulTest, MatchesNaiveAndIsRowInvariant) {
  const auto [dtype, threads, path] = GetParam();
  std::optional<ScopedAvx2Only> avx2_only;
  if (path == Path::kAvx2) {
    if ((hwy::SupportedTargets() & HWY_AVX2) == 0) GTEST_SKIP() << "no AVX2 on this CPU";
    avx2_only.emplace();
    ASSERT_FALSE(Bf16DotProductKernels());
  }
  ThreadPool pool(threads);
  MatmulScratch scratch;
  for (int64_t k : {1, 2, 3, 17, 64, 257}) {
    for (int64_t n : {1, 3, 17, 64, 257}) {
      const TestWeights weights(dtype, n, k, 7 + n * 31 + k);
      const TensorView view = weights.View();
      // Two parts, to exercise the fused (concatenated) packing.
      const int64_t n0 = n / 2;
      TensorView parts[2] = {view, view};
      parts[0].shape = {n0, k};
      parts[1].shape = {n - n0, k};
      parts[1].data = static_cast<const char*>(view.data) + n0 * k * DTypeSize(dtype);
      if (view.row_scale) parts[1].row_scale = view.row_scale + n0;
      PackedMatrix packed = n0 > 0 ? PackMatrix(parts, pool) : PackMatrix({&view, 1}, pool);
      ASSERT_EQ(packed.n(), n);
      // A row read back (an embedding lookup in a tied lm_head) is the value, rounded once.
      std::vector<float> row(k);
      for (int64_t j = 0; j < n; ++j) {
        packed.ReadRow(j, row.data());
        for (int64_t kk = 0; kk < k; ++kk) ASSERT_EQ(row[kk], static_cast<float>(weights.value[j * k + kk]));
      }
      for (int64_t m : {1, 2, 3, 4, 5, 13, 17, 64}) {
        const int64_t ldx = k + 3;
        std::vector<float> x = Random(m * ldx, 100 + m);
        // The contract: with bf16 and 8-bit weights the activations enter rounded to bf16.
        std::vector<float> x_in = x;
        if (dtype != DType::kF32) {
          for (float& v : x_in) v = Bf16ToF32(F32ToBf16(v));
        }
        std::vector<float> y(m * n, -1.0f);
        Matmul(x.data(), m, packed, y.data(), pool, ldx, &scratch);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
              ref += static_cast<double>(x_in[i * ldx + kk]) * weights.value[j * k + kk];
              mag += std::abs(static_cast<double>(x_in[i * ldx + kk]) * weights.value[j * k + kk]);
            }
            ASSERT_NEAR(y[i * n + j], ref, 1e-6 * mag + 1e-30)
                << "m=" << m << " n=" << n << " k=" << k << " at " << i << "," << j;
          }
          // Batch invariance: each row alone gives bit-identical results.
          std::vector<float> y1(n);
          Matmul(x.data() + i * ldx, 1, packed, y1.data(), pool);
          ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + i * n, n * sizeof(float)))
              << "row " << i << " of m=" << m << " n=" << n << " k=" << k;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypesAndThreads, MatmulTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kI8,
                                                              DType::kF8E4M3),
                                            ::testing::Values(1, 2, 3),
                                            ::testing::Values(Path::kBest, Path::kAvx2)));

// A slice of a packed matrix (whole panels, a range of k) gives bit for bit
// what packing that block on its own gives: Shift Parallelism's TP mode
// reads its shard as a slice of the SP x TP shard.
TEST_P(MatmulTest, SliceEqualsTheBlockPackedAlone) {
  const auto [dtype, threads, path] = GetParam();
  std::optional<ScopedAvx2Only> avx2_only;
  if (path == Path::kAvx2) {
    if ((hwy::SupportedTargets() & HWY_AVX2) == 0) GTEST_SKIP() << "no AVX2 on this CPU";
    avx2_only.emplace();
  }
  ThreadPool pool(threads);
  const int64_t n = 200, k = 130;
  const TestWeights weights(dtype, n, k, 3);
  const TensorView whole = weights.View();
  const PackedMatrix packed = PackMatrix({&whole, 1}, pool);
  // Panel-aligned row ranges (one ending at n), even k ranges, from the start, middle and end.
  const std::pair<int64_t, int64_t> row_ranges[] = {{0, 16}, {16, 80}, {48, 64}, {192, 200}, {0, 200}, {112, 200}};
  // 8-bit slices start at a multiple of 4 in k (the panels' 64-byte chunks).
  const int64_t odd_start = IsQuantized(dtype) ? 4 : 2;
  const std::pair<int64_t, int64_t> k_ranges[] = {{0, 130}, {0, 64}, {64, 130}, {odd_start, 7}, {128, 130}};
  for (const auto& [r0, r1] : row_ranges) {
    for (const auto& [k0, k1] : k_ranges) {
      const TestWeights block_weights = weights.Block(r0, r1, k0, k1);
      const TensorView block = block_weights.View();
      const PackedMatrix alone = PackMatrix({&block, 1}, pool);
      const PackedMatrix slice = packed.Slice(r0, r1, k0, k1);
      ASSERT_EQ(slice.n(), r1 - r0);
      ASSERT_EQ(slice.k(), k1 - k0);
      for (int64_t m : {1, 5, 40}) {
        std::vector<float> x = Random(m * (k1 - k0), 50 + m);
        std::vector<float> want(m * (r1 - r0)), got(want.size(), -1.0f);
        Matmul(x.data(), m, alone, want.data(), pool);
        Matmul(x.data(), m, slice, got.data(), pool);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << "rows [" << r0 << ", " << r1 << ") k [" << k0 << ", " << k1 << ") m " << m;
      }
    }
  }
}

// Where the CPU has AVX512_BF16 the best path must be the dot-product kernels
// (a silent fallback would cost half the prefill speed).
TEST(MatmulPathTest, UsesDotProductsWhereTheCpuHasThem) {
  const bool cpu_has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                       (hwy::SupportedTargets() & HWY_AVX3) != 0;
  EXPECT_EQ(Bf16DotProductKernels(), cpu_has);
}

TEST(OpsTest, RowOpsMatchNaive) {
  for (int64_t n : {1, 3, 17, 64, 257}) {
    std::vector<float> x = Random(n, 1 + n), w = Random(n, 2 + n), u = Random(n, 3 + n);
    std::vector<float> y(n);
    RmsNorm(x.data(), w.data(), 1e-5f, n, y.data());
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], w[i] * x[i] * inv, 1e-5 * (1 + std::abs(y[i])));

    SiluMul(x.data(), u.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ref = x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))) * u[i];
      EXPECT_NEAR(y[i], ref, 1e-5 * (1 + std::abs(ref)));
    }
    std::vector<float> acc = u;
    AddInPlace(acc.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(acc[i], u[i] + x[i]);
  }
}

TEST(OpsTest, EmbeddingLookupWidensBf16) {
  std::vector<float> table = Random(5 * 3, 9);
  std::vector<uint16_t> bf(table.size());
  for (size_t i = 0; i < table.size(); ++i) bf[i] = F32ToBf16(table[i]);
  const int32_t ids[] = {4, 0, 4};
  std::vector<float> out(9);
  EmbeddingLookup(TensorView{DType::kBF16, {5, 3}, bf.data()}, ids, out.data());
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out[i * 3 + j], Bf16ToF32(bf[ids[i] * 3 + j]));
  }
  EmbeddingLookup(TensorView{DType::kF32, {5, 3}, table.data()}, ids, out.data());
  EXPECT_EQ(out[0], table[12]);
}

TEST(RopeTest, Llama3InvFreqMatchesHfFormula) {
  RopeParams p;
  p.head_dim = 64;
  p.theta = 500000.0f;
  p.scaling_type = "llama3";
  p.factor = 32.0f;
  p.low_freq_factor = 1.0f;
  p.high_freq_factor = 4.0f;
  p.original_max_position_embeddings = 8192;
  std::vector<float> inv = RopeInvFreq(p);
  ASSERT_EQ(inv.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double base = 1.0 / std::pow(500000.0, 2.0 * i / 64);
    const double wavelen = 2 * M_PI / base;
    double expected;
    if (wavelen < 8192.0 / 4) {
      expected = base;
    } else if (wavelen > 8192.0) {
      expected = base / 32;
    } else {
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      expected = (1 - smooth) * base / 32 + smooth * base;
    }
    EXPECT_NEAR(inv[i], expected, 1e-6 * expected) << i;
  }
}

TEST(RopeTest, RotatesPairsHalfApart) {
  for (int hd : {2, 16, 64}) {
    RopeParams p;
    p.head_dim = hd;
    std::vector<float> inv = RopeInvFreq(p);
    std::vector<float> c(hd / 2), s(hd / 2);
    RopeCosSin(inv, 17, c.data(), s.data());
    std::vector<float> x = Random(3 * hd, hd), ref = x;
    ApplyRope(x.data(), 3, hd, c.data(), s.data());
    for (int h = 0; h < 3; ++h) {
      for (int i = 0; i < hd / 2; ++i) {
        const double a = ref[h * hd + i], b = ref[h * hd + i + hd / 2];
        const double ang = 17.0 * std::pow(10000.0, -2.0 * i / hd);
        EXPECT_NEAR(x[h * hd + i], a * std::cos(ang) - b * std::sin(ang), 1e-5);
        EXPECT_NEAR(x[h * hd + i + hd / 2], b * std::cos(ang) + a * std::sin(ang), 1e-5);
      }
    }
  }
}

class AttentionTest : public ::testing::TestWithParam<int> {};

// head_dim 12 and 20 leave a tail after the vector lanes.
INSTANTIATE_TEST_SUITE_P(HeadDims, AttentionTest, ::testing::Values(12, 16, 20, 64));

// Groups of 2, 4 and 7 query heads per kv head (7: passes of 4, 2 and 1);
// 64 threads slice each group into single heads, which must not change a bit.
TEST_P(AttentionTest, PagedGqaMatchesNaive) {
  for (const auto [heads, kv_heads] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{14, 2}}) {
  SCOPED_TRACE(testing::Message() << heads << " heads, " << kv_heads << " kv heads");
  const int hd = GetParam(), block_size = 3, num_blocks = 40;
  const float scale = 0.25f;
  std::vector<float> first_out;
  for (int threads : {1, 2, 64}) {
    ThreadPool pool(threads);
    std::vector<float> kc(num_blocks * kv_heads * block_size * hd), vc(kc.size());
    KvLayer kv{kc.data(), vc.data(), block_size, kv_heads, hd};
    // Two sequences with shuffled blocks: one prefill chunk at start 5, one decode at 17.
    std::vector<int32_t> table0 = {7, 3, 11, 0, 20, 21, 22, 23, 5, 9};
    std::vector<int32_t> table1 = {1, 2, 4, 6, 8, 10, 12};
    struct Seq { int start, n; std::vector<int32_t>* table; };
    Seq seqs_def[] = {{5, 17, &table0}, {17, 1, &table1}};
    // Full K/V history per sequence (positions 0..start+n-1).
    std::vector<std::vector<float>> k_hist, v_hist;
    std::vector<AttentionSeq> seqs;
    int64_t rows = 0;
    for (auto& s : seqs_def) {
      const int total = s.start + s.n;
      k_hist.push_back(Random(total * kv_heads * hd, 50 + total));
      v_hist.push_back(Random(total * kv_heads * hd, 60 + total));
      // Older positions go straight to the cache; new ones through WriteKv.
      for (int pos = 0; pos < s.start; ++pos) {
        for (int h = 0; h < kv_heads; ++h) {
          const int64_t off = kv.Offset((*s.table)[pos / block_size], h, pos % block_size);
          std::memcpy(&kc[off], &k_hist.back()[(pos * kv_heads + h) * hd], hd * 4);
          std::memcpy(&vc[off], &v_hist.back()[(pos * kv_heads + h) * hd], hd * 4);
        }
      }
      seqs.push_back({rows, s.n, s.start, s.table->data()});
      rows += s.n;
    }
    std::vector<float> k_new(rows * kv_heads * hd), v_new(k_new.size());
    for (size_t si = 0; si < seqs.size(); ++si) {
      const int64_t off = seqs[si].start_pos * kv_heads * hd;
      std::memcpy(&k_new[seqs[si].first_row * kv_heads * hd], &k_hist[si][off], seqs[si].num_tokens * kv_heads * hd * 4);
      std::memcpy(&v_new[seqs[si].first_row * kv_heads * hd], &v_hist[si][off], seqs[si].num_tokens * kv_heads * hd * 4);
    }
    WriteKv(kv, seqs, k_new.data(), v_new.data(), kv_heads * hd);
    std::vector<float> q = Random(rows * heads * hd, 77), out(rows * heads * hd);
    const int64_t max_ctx = 22 * kAttentionScratchRows;
    std::vector<float> scratch(threads * max_ctx);
    PagedAttention(q.data(), heads * hd, seqs, kv, heads, scale, out.data(), heads * hd,
                   scratch.data(), max_ctx, pool);
    if (first_out.empty()) first_out = out;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], first_out[i]) << threads << " threads, element " << i;
    for (size_t si = 0; si < seqs.size(); ++si) {
      for (int i = 0; i < seqs[si].num_tokens; ++i) {
        const int64_t row = seqs[si].first_row + i;
        const int ctx = seqs[si].start_pos + i + 1;
        for (int h = 0; h < heads; ++h) {
          const int g = h / (heads / kv_heads);
          std::vector<double> sc(ctx);
          double mx = -1e300, sum = 0;
          for (int j = 0; j < ctx; ++j) {
            double d = 0;
            for (int e = 0; e < hd; ++e) d += q[(row * heads + h) * hd + e] * k_hist[si][(j * kv_heads + g) * hd + e];
            sc[j] = d * scale;
            mx = std::max(mx, sc[j]);
          }
          for (double& v : sc) sum += (v = std::exp(v - mx));
          for (int e = 0; e < hd; ++e) {
            double ref = 0;
            for (int j = 0; j < ctx; ++j) ref += sc[j] / sum * v_hist[si][(j * kv_heads + g) * hd + e];
            ASSERT_NEAR(out[(row * heads + h) * hd + e], ref, 1e-5) << si << " " << i << " " << h;
          }
        }
      }
    }
  }
  }
}

// A narrow cache (bf16; fp8 e4m3 with scales of 1 and of powers of two) is
// written rounded to nearest even and read widened exactly: attention over
// it equals, bit for bit, attention over an f32 cache that holds the same
// values (prefill chunk, decode and a tree mask; the best SIMD path and
// AVX2; one and two threads).
struct NarrowKv {
  KvDtype dtype;
  float k_scale, v_scale;
};

class NarrowKvTest : public ::testing::TestWithParam<std::tuple<int, Path, NarrowKv>> {};

INSTANTIATE_TEST_SUITE_P(HeadDimsPathsAndTypes, NarrowKvTest,
                         ::testing::Combine(::testing::Values(12, 16, 20, 64),
                                            ::testing::Values(Path::kBest, Path::kAvx2),
                                            ::testing::Values(NarrowKv{KvDtype::kBf16, 1.0f, 1.0f},
                                                              NarrowKv{KvDtype::kFp8E4m3, 1.0f, 1.0f},
                                                              NarrowKv{KvDtype::kFp8E4m3, 0.25f, 8.0f})));

TEST_P(NarrowKvTest, EqualsAnF32CacheOfTheRoundedValues) {
  // Not a structured binding: clang (the sanitizer build) cannot capture one in C++17.
  const int hd = std::get<0>(GetParam());
  const Path path = std::get<1>(GetParam());
  const NarrowKv narrow = std::get<2>(GetParam());
  std::optional<ScopedAvx2Only> avx2;
  if (path == Path::kAvx2) avx2.emplace();
  const int heads = 8, kv_heads = 2, block_size = 4, num_blocks = 24;
  const float scale = 0.3f;
  std::vector<int32_t> table0 = {9, 2, 14, 0, 5, 21, 7, 11}, table1 = {1, 3, 4, 6, 8, 10};
  // Sequence 0: a 9-token prefill chunk at 6; sequence 1: a 4-token tree at 13.
  std::vector<int32_t> parents = {-1, 0, 0, 1}, begin, paths;
  AppendTreePaths(parents, 13, begin, paths);
  std::vector<AttentionSeq> seqs = {{0, 9, 6, table0.data()}, {9, 4, 13, table1.data(), begin.data(), paths.data()}};
  const int64_t rows = 13;
  // The value a cached element stands for.
  const auto widen = [&](const uint8_t* cache, size_t i, float s) {
    if (narrow.dtype == KvDtype::kBf16) return Bf16ToF32(reinterpret_cast<const uint16_t*>(cache)[i]);
    return F8E4M3ToF32(cache[i]) * s;
  };
  const auto round = [&](std::vector<float> x, float s) {
    for (float& f : x) {
      f = narrow.dtype == KvDtype::kBf16 ? Bf16ToF32(F32ToBf16(f)) : F8E4M3ToF32(F32ToF8E4M3(f / s)) * s;
    }
    return x;
  };
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> k32(num_blocks * kv_heads * block_size * hd), v32(k32.size());
    std::vector<uint8_t> kn(k32.size() * KvElementBytes(narrow.dtype)), vn(kn.size());
    KvLayer f32{k32.data(), v32.data(), block_size, kv_heads, hd, KvDtype::kF32};
    KvLayer nkv{kn.data(), vn.data(), block_size, kv_heads, hd, narrow.dtype, narrow.k_scale, narrow.v_scale};
    // The context (every position before each sequence's start), then the new rows.
    for (int si = 0; si < 2; ++si) {
      const int start = seqs[si].start_pos;
      std::vector<float> kh = Random(start * kv_heads * hd, 10 + si, 2.0f), vh = Random(kh.size(), 20 + si, 2.0f);
      std::vector<AttentionSeq> past = {{0, start, 0, seqs[si].block_table}};
      WriteKv(nkv, past, kh.data(), vh.data(), kv_heads * hd);
      WriteKv(f32, past, round(kh, narrow.k_scale).data(), round(vh, narrow.v_scale).data(), kv_heads * hd);
    }
    const std::vector<float> k_new = Random(rows * kv_heads * hd, 31, 2.0f), v_new = Random(k_new.size(), 32, 2.0f);
    WriteKv(nkv, seqs, k_new.data(), v_new.data(), kv_heads * hd);
    WriteKv(f32, seqs, round(k_new, narrow.k_scale).data(), round(v_new, narrow.v_scale).data(), kv_heads * hd);
    for (size_t i = 0; i < k32.size(); ++i) {
      ASSERT_EQ(widen(kn.data(), i, narrow.k_scale), k32[i]) << i;
      ASSERT_EQ(widen(vn.data(), i, narrow.v_scale), v32[i]) << i;
    }
    const std::vector<float> q = Random(rows * heads * hd, 41);
    std::vector<float> outn(rows * heads * hd), out32(outn.size());
    const int64_t max_ctx = 32 * kAttentionScratchRows;
    std::vector<float> scratch(threads * max_ctx);
    PagedAttention(q.data(), heads * hd, seqs, nkv, heads, scale, outn.data(), heads * hd, scratch.data(), max_ctx,
                   pool);
    PagedAttention(q.data(), heads * hd, seqs, f32, heads, scale, out32.data(), heads * hd, scratch.data(), max_ctx,
                   pool);
    for (size_t i = 0; i < outn.size(); ++i) ASSERT_EQ(outn[i], out32[i]) << "element " << i;
  }
}

TEST(Fp8KvTest, WritesDivideByTheScaleRoundToNearestEvenAndSaturate) {
  // With k_scale 2: 2.125 -> 1.0625, halfway between e4m3's 1.0 and 1.125:
  // the even one (1.0); 1000 -> 500, past e4m3's largest finite 448:
  // saturated; -0.01 -> -0.005, a subnormal (multiples of 2^-9).
  std::vector<float> k = {2.125f, 1000.0f, -0.01f}, v = {2.125f, -1000.0f, 3.0f};
  std::vector<uint8_t> kc(3), vc(3);
  const int32_t table[] = {0};
  KvLayer kv{kc.data(), vc.data(), 3, 1, 1, KvDtype::kFp8E4m3, 2.0f, 1.0f};
  const AttentionSeq seq[] = {{0, 3, 0, table}};
  WriteKv(kv, seq, k.data(), v.data(), 1);
  EXPECT_EQ(F8E4M3ToF32(kc[0]), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(kc[1]), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(kc[2]), -3.0f / 512.0f);  // -0.005 * 512 = -2.56 -> -3
  EXPECT_EQ(F8E4M3ToF32(vc[0]), 2.0f);            // 2.125 is halfway between 2.0 and 2.25
  EXPECT_EQ(F8E4M3ToF32(vc[1]), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(vc[2]), 3.0f);
}

TEST(Bf16KvTest, WritesRoundToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values: it rounds to the even one
  // (1.0); a hair above rounds up.
  const float halfway = 1.0f + std::ldexp(1.0f, -8), above = std::nextafter(halfway, 2.0f);
  std::vector<float> k = {halfway, above}, v = {-halfway, -above};
  std::vector<uint16_t> kc(2), vc(2);
  const int32_t table[] = {0};
  KvLayer kv{kc.data(), vc.data(), 2, 1, 1, KvDtype::kBf16};
  const AttentionSeq seq[] = {{0, 2, 0, table}};
  WriteKv(kv, seq, k.data(), v.data(), 1);
  EXPECT_EQ(Bf16ToF32(kc[0]), 1.0f);
  EXPECT_EQ(Bf16ToF32(kc[1]), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(Bf16ToF32(vc[0]), -1.0f);
  EXPECT_EQ(Bf16ToF32(vc[1]), -1.0f - std::ldexp(1.0f, -7));
}

}  // namespace
}  // namespace floe::cpu
