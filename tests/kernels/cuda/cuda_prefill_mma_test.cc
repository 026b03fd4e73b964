// PrefillAttentionMma (tensor cores) against two host references on the same
// bf16 or fp8 cache, written by the CPU's WriteKv:
//   - its own arithmetic emulated (Q and each key tile's softmax weights
//     rounded to bf16, the running max per 64-key tile), which it must
//     match to f32 summation order: mean |diff| <= 1e-5, max <= 2^-8 of the
//     largest |value| (a weight near a bf16 rounding boundary may round the
//     other way once);
//   - the CPU's f32 PagedAttention, which it must match within the bf16
//     rounding's own bound: max <= kBf16Bound x (1 + |want|).
// The emulation's distance to the CPU is checked against that bound on the
// host (EmulationIsWithinTheBoundOfTheCpu, no device needed), so the bound
// is measured, not assumed. Label gpu: the device cases skip without one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/tensor/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/model_kernels.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace floe {
namespace {

using cuda_test::DeviceVec;
using cuda_test::Random;

// Relative to 1 + |want|: bf16 Q and P against the CPU's f32 (Q's rounding
// moves each score by up to 2^-9 of sum |q_d k_d| x scale; P's, each weight
// by 2^-9; measured on the host: up to 4.3e-3, see the emulation test).
constexpr float kBf16Bound = 1e-2f;

struct MmaCase {
  cpu::KvDtype cpu;
  cuda::KvDtype cuda;
  float k_scale, v_scale;
  int head_dim;
};

std::string Name(const MmaCase& c) {
  return std::string(cpu::KvDtypeName(c.cpu)) + " head_dim " + std::to_string(c.head_dim);
}

// One step of three prompts, every row a chain row: 100 rows after 37
// cached tokens (two tiles, the second of 36 rows; keys past 128), a whole
// 64-row tile from position 0, and 17 rows after 200. Heads 8 over 2 KV
// heads (groups of 4), blocks of 16, each sequence's blocks scattered.
struct Step {
  static constexpr int kHeads = 8, kKvHeads = 2, kBlockSize = 16, kBlocks = 48, kRows = 181;
  int hd, q_dim, kv_dim, width;
  std::vector<std::vector<int32_t>> tables;
  std::vector<cpu::AttentionSeq> seqs;
  std::vector<float> qkv;
  std::vector<uint8_t> k_cache, v_cache;
  cpu::KvLayer kv;
  std::vector<int32_t> context;  // per row: it attends to [0, context)

  explicit Step(const MmaCase& c) : hd(c.head_dim) {
    q_dim = kHeads * hd;
    kv_dim = kKvHeads * hd;
    width = q_dim + 2 * kv_dim;
    tables = {{8, 7, 6, 5, 4, 3, 2, 1, 0}, {20, 22, 21, 23}, {}};
    for (int b = 0; b < 14; ++b) tables[2].push_back(30 + (b * 5) % 14);
    const int rows[] = {100, 64, 17}, starts[] = {37, 0, 200};
    int64_t row = 0;
    for (int s = 0; s < 3; ++s) {
      seqs.push_back({row, rows[s], starts[s], tables[s].data()});
      for (int i = 0; i < rows[s]; ++i) context.push_back(starts[s] + i + 1);
      row += rows[s];
    }
    const size_t elements = static_cast<size_t>(kBlocks) * kKvHeads * kBlockSize * hd;
    k_cache.assign(elements * cpu::KvElementBytes(c.cpu), 0);
    v_cache.assign(elements * cpu::KvElementBytes(c.cpu), 0);
    kv = cpu::KvLayer{k_cache.data(), v_cache.data(), kBlockSize, kKvHeads, hd, c.cpu, c.k_scale, c.v_scale};
    for (int s = 0; s < 3; ++s) {  // the cached context, then the step's own rows
      const int start = seqs[s].start_pos;
      const std::vector<float> k = Random(start * kv_dim, 90 + s), v = Random(start * kv_dim, 95 + s);
      const std::vector<cpu::AttentionSeq> past = {{0, start, 0, seqs[s].block_table}};
      if (start > 0) cpu::WriteKv(kv, past, k.data(), v.data(), kv_dim);
    }
    qkv = Random(static_cast<size_t>(kRows) * width, 99);
    cpu::WriteKv(kv, seqs, qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, width);
  }

  // A cached element's value before its scale (the code, widened exactly).
  float Code(const std::vector<uint8_t>& cache, int64_t at) const {
    if (kv.dtype == cpu::KvDtype::kBf16) {
      uint16_t bits;
      std::memcpy(&bits, cache.data() + 2 * at, 2);
      return Bf16ToF32(bits);
    }
    return F8E4M3ToF32(cache[at]);
  }

  std::vector<float> Cpu() const {
    std::vector<float> out(static_cast<size_t>(kRows) * q_dim);
    cpu::ThreadPool pool(2);
    const int64_t per_thread = 256 * cpu::kAttentionScratchRows;
    std::vector<float> scratch(2 * per_thread);
    cpu::PagedAttention(qkv.data(), width, seqs, kv, kHeads, Scale(), out.data(), q_dim, scratch.data(),
                        per_thread, pool);
    return out;
  }

  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(hd)); }

  // The kernel's arithmetic, sums in double.
  std::vector<float> Emulated() const {
    std::vector<float> out(static_cast<size_t>(kRows) * q_dim);
    const float scale = Scale() * kv.k_scale;  // as the launcher folds it
    for (const cpu::AttentionSeq& seq : seqs) {
      for (int i = 0; i < seq.num_tokens; ++i) {
        const int64_t row = seq.first_row + i;
        const int keys = context[row];
        for (int h = 0; h < kHeads; ++h) {
          const int kvh = h / (kHeads / kKvHeads);
          std::vector<double> q(hd), o(hd, 0.0);
          for (int d = 0; d < hd; ++d) q[d] = Bf16ToF32(F32ToBf16(qkv[row * width + h * hd + d]));
          float m = -INFINITY;
          double l = 0;
          for (int k0 = 0; k0 < keys; k0 += 64) {
            const int k1 = std::min(keys, k0 + 64);
            std::vector<float> s(k1 - k0);
            float tile_max = -INFINITY;
            for (int j = k0; j < k1; ++j) {
              const int64_t at = kv.Offset(seq.block_table[j / kBlockSize], kvh, j % kBlockSize);
              double dot = 0;
              for (int d = 0; d < hd; ++d) dot += q[d] * Code(k_cache, at + d);
              s[j - k0] = static_cast<float>(dot) * scale;
              tile_max = std::max(tile_max, s[j - k0]);
            }
            const float next = std::max(m, tile_max);
            const double correction = std::exp(static_cast<double>(m) - next);
            l *= correction;
            for (double& x : o) x *= correction;
            for (int j = k0; j < k1; ++j) {
              const float p = std::exp(s[j - k0] - next);
              l += p;
              const double pb = Bf16ToF32(F32ToBf16(p));
              const int64_t at = kv.Offset(seq.block_table[j / kBlockSize], kvh, j % kBlockSize);
              for (int d = 0; d < hd; ++d) o[d] += pb * Code(v_cache, at + d);
            }
            m = next;
          }
          for (int d = 0; d < hd; ++d) out[row * q_dim + h * hd + d] = static_cast<float>(o[d] * kv.v_scale / l);
        }
      }
    }
    return out;
  }
};

struct Distance {
  double max_rel = 0;   // max |a - b| / (1 + |b|)
  double max_abs = 0;
  double mean_abs = 0;
};

Distance Measure(const std::vector<float>& a, const std::vector<float>& b) {
  Distance d;
  for (size_t i = 0; i < b.size(); ++i) {
    const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
    d.max_rel = std::max(d.max_rel, diff / (1.0 + std::abs(b[i])));
    d.max_abs = std::max(d.max_abs, diff);
    d.mean_abs += diff / b.size();
  }
  return d;
}

class CudaPrefillMmaTest : public ::testing::TestWithParam<MmaCase> {};

INSTANTIATE_TEST_SUITE_P(
    KvDtypes, CudaPrefillMmaTest,
    ::testing::Values(MmaCase{cpu::KvDtype::kBf16, cuda::KvDtype::kBf16, 1.0f, 1.0f, 128},
                      MmaCase{cpu::KvDtype::kBf16, cuda::KvDtype::kBf16, 1.0f, 1.0f, 64},
                      MmaCase{cpu::KvDtype::kBf16, cuda::KvDtype::kBf16, 1.0f, 1.0f, 96},
                      MmaCase{cpu::KvDtype::kBf16, cuda::KvDtype::kBf16, 1.0f, 1.0f, 16},
                      MmaCase{cpu::KvDtype::kFp8E4m3, cuda::KvDtype::kFp8E4m3, 0.37f, 0.21f, 128},
                      MmaCase{cpu::KvDtype::kFp8E4m3, cuda::KvDtype::kFp8E4m3, 0.37f, 0.21f, 64},
                      MmaCase{cpu::KvDtype::kFp8E4m3, cuda::KvDtype::kFp8E4m3, 0.37f, 0.21f, 32}));

// Host only: the emulated kernel is within kBf16Bound of the CPU, and not
// trivially (it does round: a distance of 0 would mean the emulation is the
// CPU's arithmetic and proves nothing about the bound).
TEST_P(CudaPrefillMmaTest, EmulationIsWithinTheBoundOfTheCpu) {
  const Step step(GetParam());
  const Distance d = Measure(step.Emulated(), step.Cpu());
  std::printf("%s: emulation vs CPU max rel %.2e, max abs %.2e, mean abs %.2e\n", Name(GetParam()).c_str(),
              d.max_rel, d.max_abs, d.mean_abs);
  EXPECT_LE(d.max_rel, kBf16Bound);
  EXPECT_GT(d.mean_abs, 1e-5);
}

TEST_P(CudaPrefillMmaTest, MatchesItsEmulationAndTheCpuWithinBf16) {
  FLOE_REQUIRE_CUDA_DEVICE();
  const MmaCase c = GetParam();
  ASSERT_TRUE(cuda::PrefillAttentionMmaSupported(c.cuda, c.head_dim)) << "needs sm_80 or later";
  const Step step(c);
  std::vector<int32_t> write, table_of, flat, tiles;
  for (const cpu::AttentionSeq& seq : step.seqs) {
    const auto& table = step.tables[&seq - step.seqs.data()];
    const int32_t offset = static_cast<int32_t>(flat.size());
    flat.insert(flat.end(), table.begin(), table.end());
    for (int i = 0; i < seq.num_tokens; ++i) {
      write.push_back(seq.start_pos + i);
      table_of.push_back(offset);
    }
    for (int first = 0; first < seq.num_tokens; first += cuda::kMmaPrefillTileRows) {
      tiles.push_back(static_cast<int32_t>(seq.first_row) + first);
      tiles.push_back(std::min(cuda::kMmaPrefillTileRows, seq.num_tokens - first));
    }
  }
  const std::vector<int32_t> zeros(Step::kRows, 0);
  DeviceVec<int32_t> d_write(write), d_table(table_of), d_context(step.context), d_zero(zeros), d_tables(flat),
      d_tiles(tiles);
  cuda::StepLayout layout{Step::kRows, d_write.get(), d_table.get(), d_context.get(), d_zero.get(), d_zero.get(),
                          d_tables.get(), nullptr};
  DeviceVec<uint8_t> dk(step.k_cache), dv(step.v_cache);
  DeviceVec<float> dq(step.qkv), out{std::vector<float>(static_cast<size_t>(Step::kRows) * step.q_dim, 7.0f)};
  const cuda::PagedKv dkv{dk.get(), dv.get(), Step::kBlockSize, Step::kKvHeads, c.head_dim, c.cuda, c.k_scale,
                          c.v_scale};
  ASSERT_CUDA(cuda::PrefillAttentionMma(dq.get(), step.width, layout, dkv, Step::kHeads, step.Scale(), out.get(),
                                        step.q_dim, d_tiles.get(), static_cast<int>(tiles.size() / 2), nullptr));
  ASSERT_CUDA(static_cast<int>(cudaDeviceSynchronize()));
  const std::vector<float> got = out.Host(), emulated = step.Emulated();
  float largest = 0;  // the largest |value| a row may average: |code| x v_scale
  for (size_t i = 0; i < step.v_cache.size() / cpu::KvElementBytes(c.cpu); ++i) {
    largest = std::max(largest, std::abs(step.Code(step.v_cache, i)) * c.v_scale);
  }
  const Distance own = Measure(got, emulated), cpu_distance = Measure(got, step.Cpu());
  std::printf("%s: kernel vs emulation max abs %.2e, mean abs %.2e; vs CPU max rel %.2e\n", Name(c).c_str(),
              own.max_abs, own.mean_abs, cpu_distance.max_rel);
  EXPECT_LE(own.mean_abs, 1e-5) << Name(c);
  EXPECT_LE(own.max_abs, largest / 256) << Name(c);
  EXPECT_LE(cpu_distance.max_rel, kBf16Bound) << Name(c);
}

TEST(CudaPrefillMmaRefusalTest, RefusesF32CachesAndOddHeadDims) {
  FLOE_REQUIRE_CUDA_DEVICE();
  EXPECT_FALSE(cuda::PrefillAttentionMmaSupported(cuda::KvDtype::kF32, 128));
  EXPECT_FALSE(cuda::PrefillAttentionMmaSupported(cuda::KvDtype::kBf16, 72));
  EXPECT_FALSE(cuda::PrefillAttentionMmaSupported(cuda::KvDtype::kBf16, 256));
  DeviceVec<int32_t> ints{std::vector<int32_t>(8, 0)};
  DeviceVec<float> f{std::vector<float>(1024, 0.0f)};
  cuda::StepLayout layout{1, ints.get(), ints.get(), ints.get(), ints.get(), ints.get(), ints.get(), nullptr};
  cuda::PagedKv f32_kv{f.get(), f.get(), 16, 1, 16};
  EXPECT_NE(cuda::PrefillAttentionMma(f.get(), 16, layout, f32_kv, 1, 1.0f, f.get(), 16, ints.get(), 1, nullptr), 0);
  cuda::PagedKv odd{f.get(), f.get(), 16, 1, 24, cuda::KvDtype::kBf16};
  EXPECT_NE(cuda::PrefillAttentionMma(f.get(), 24, layout, odd, 1, 1.0f, f.get(), 24, ints.get(), 1, nullptr), 0);
  cudaGetLastError();
}

}  // namespace
}  // namespace floe
