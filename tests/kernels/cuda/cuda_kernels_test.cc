// Each CUDA kernel of kernels/cuda/model_kernels.h against the CPU op it
// mirrors, on seeded random inputs (label gpu; "skipped: no CUDA device"
// where none is visible). Bounds, relative to 1 + |reference|: exact for
// gathers, copies and the bf16 rounding; 1e-5 for norms, SiLU and RoPE
// (expf / rsqrtf against the CPU's own); 1e-4 for attention (online
// softmax against the CPU's two passes).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/tensor/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/model_kernels.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/sampling.h"
#include "services/worker/sampling/counter_rng.h"
#include "services/worker/sampling/sampler.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace floe {
namespace {

using cuda_test::DeviceVec;
using cuda_test::Random;

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::abs(got[i] - want[i]), tol * (1.0f + std::abs(want[i]))) << what << " at " << i;
  }
}

TEST(CudaKernelsTest, EmbedRowsGathersExactly) {
  FLOE_REQUIRE_CUDA_DEVICE();
  const int vocab = 50, hidden = 72;
  const std::vector<float> table = Random(vocab * hidden, 1);
  std::vector<uint16_t> table_bf16(table.size());
  for (size_t i = 0; i < table.size(); ++i) table_bf16[i] = F32ToBf16(table[i]);
  const std::vector<int32_t> tokens = {3, 0, 49, 3, 17};
  DeviceVec<int32_t> d_tokens(tokens);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    TensorView view{dtype, {vocab, hidden}, dtype == DType::kF32 ? static_cast<const void*>(table.data())
                                                                 : static_cast<const void*>(table_bf16.data())};
    std::vector<float> want(tokens.size() * hidden);
    cpu::EmbeddingLookup(view, tokens, want.data());
    DeviceVec<float> d_f32(table);
    DeviceVec<uint16_t> d_bf16(table_bf16);
    DeviceVec<float> out(std::vector<float>(want.size()));
    const void* d_table = dtype == DType::kF32 ? static_cast<const void*>(d_f32.get()) : d_bf16.get();
    ASSERT_CUDA(cuda::EmbedRows(d_table, dtype == DType::kF32 ? cuda::Dtype::kF32 : cuda::Dtype::kBf16,
                                d_tokens.get(), static_cast<int>(tokens.size()), hidden, out.get(), nullptr));
    EXPECT_EQ(out.Host(), want) << DTypeName(dtype);
  }
}

TEST(CudaKernelsTest, NormsMatchTheCpu) {
  FLOE_REQUIRE_CUDA_DEVICE();
  for (int cols : {16, 257, 2048}) {
    const int rows = 6;
    const std::vector<float> x = Random(rows * cols, cols), delta = Random(rows * cols, cols + 1);
    std::vector<float> w = Random(cols, cols + 2, 0.1f);
    for (float& v : w) v += 1.0f;
    // AddRmsNorm, with out aliasing delta as the model calls it.
    std::vector<float> want_x = x, want_out(rows * cols);
    for (int r = 0; r < rows; ++r) {
      cpu::AddInPlace(&want_x[r * cols], &delta[r * cols], cols);
      cpu::RmsNorm(&want_x[r * cols], w.data(), 1e-5f, cols, &want_out[r * cols]);
    }
    DeviceVec<float> dx(x), dd(delta), dw(w);
    ASSERT_CUDA(cuda::AddRmsNormF32(dx.get(), dd.get(), dw.get(), 1e-5f, rows, cols, dd.get(), nullptr));
    ExpectNear(dx.Host(), want_x, 1e-6f, "AddRmsNorm x");
    ExpectNear(dd.Host(), want_out, 1e-5f, "AddRmsNorm out");
    // GatherRmsNorm over rows 4, 1, 4.
    const std::vector<int64_t> index = {4, 1, 4};
    std::vector<float> want_g(index.size() * cols);
    for (size_t i = 0; i < index.size(); ++i) cpu::RmsNorm(&x[index[i] * cols], w.data(), 1e-5f, cols, &want_g[i * cols]);
    DeviceVec<float> dx2(x), dg(std::vector<float>(want_g.size()));
    DeviceVec<int64_t> di(index);
    ASSERT_CUDA(cuda::GatherRmsNormF32(dx2.get(), di.get(), dw.get(), 1e-5f, 3, cols, dg.get(), nullptr));
    ExpectNear(dg.Host(), want_g, 1e-5f, "GatherRmsNorm");
  }
}

TEST(CudaKernelsTest, SiluMulAndAddMatchTheCpu) {
  FLOE_REQUIRE_CUDA_DEVICE();
  for (int groups : {1, 3}) {
    const int rows = 5, inter = 40, width = 2 * groups * inter;
    const std::vector<float> data = Random(rows * width, groups, 3.0f);
    std::vector<float> want = data;
    for (int r = 0; r < rows; ++r) {
      float* row = &want[r * width];
      for (int g = 0; g < groups; ++g) cpu::SiluMul(row + 2 * g * inter, row + (2 * g + 1) * inter, inter, row + g * inter);
    }
    DeviceVec<float> d(data);
    ASSERT_CUDA(cuda::SiluMulF32(d.get(), rows, groups, inter, nullptr));
    const std::vector<float> got = d.Host();
    for (int r = 0; r < rows; ++r) {  // the first groups * inter of each row are defined
      ExpectNear(std::vector<float>(got.begin() + r * width, got.begin() + r * width + groups * inter),
                 std::vector<float>(want.begin() + r * width, want.begin() + r * width + groups * inter), 1e-5f,
                 "SiluMul");
    }
  }
  const std::vector<float> x = Random(100000, 5), y = Random(100000, 6);
  std::vector<float> want = x;
  cpu::AddInPlace(want.data(), y.data(), static_cast<int64_t>(want.size()));
  DeviceVec<float> dx(x), dy(y);
  ASSERT_CUDA(cuda::AddF32(dx.get(), dy.get(), static_cast<int64_t>(x.size()), nullptr));
  EXPECT_EQ(dx.Host(), want);
}

// The MLP's bf16 path: bf16 [gate | up] groups (row stride past the groups)
// to the bf16 product, against the CPU's SiluMul over the same widened
// values rounded once: equal, or one bf16 step apart where expf and the
// CPU's exp differ across a rounding boundary (at most 1% of elements).
TEST(CudaKernelsTest, SiluMulBf16IsTheCpusRounded) {
  FLOE_REQUIRE_CUDA_DEVICE();
  for (int groups : {1, 3}) {
    const int rows = 7, inter = 300, ld = 2 * groups * inter + 8;
    const std::vector<float> values = Random(rows * ld, 40 + groups, 3.0f);
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = F32ToBf16(values[i]);
    std::vector<uint16_t> want(rows * groups * inter);
    for (int r = 0; r < rows; ++r) {
      for (int g = 0; g < groups; ++g) {
        std::vector<float> gate(inter), up(inter), out(inter);
        for (int i = 0; i < inter; ++i) {
          gate[i] = Bf16ToF32(bits[r * ld + 2 * g * inter + i]);
          up[i] = Bf16ToF32(bits[r * ld + (2 * g + 1) * inter + i]);
        }
        cpu::SiluMul(gate.data(), up.data(), inter, out.data());
        for (int i = 0; i < inter; ++i) want[(r * groups + g) * inter + i] = F32ToBf16(out[i]);
      }
    }
    DeviceVec<uint16_t> d(bits), out{std::vector<uint16_t>(want.size(), 0xffff)};
    ASSERT_CUDA(cuda::SiluMulBf16(d.get(), ld, rows, groups, inter, out.get(), nullptr));
    const std::vector<uint16_t> got = out.Host();
    int apart = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      ASSERT_LE(std::abs(static_cast<int>(got[i]) - static_cast<int>(want[i])), 1) << "element " << i;
      ++apart;
    }
    EXPECT_LE(apart, static_cast<int>(want.size() / 100)) << groups << " groups";
  }
}

TEST(CudaKernelsTest, Bf16RoundingIsTheCpusBitForBit) {
  FLOE_REQUIRE_CUDA_DEVICE();
  const int rows = 4, cols = 33, stride = 40;
  std::vector<float> in = Random(rows * stride, 9, 100.0f);
  in[0] = 1.0f + 1.0f / 256;  // a tie: rounds to even
  std::vector<uint16_t> want(rows * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want[r * cols + c] = F32ToBf16(in[r * stride + c]);
  DeviceVec<float> din(in);
  DeviceVec<uint16_t> out(std::vector<uint16_t>(want.size()));
  ASSERT_CUDA(cuda::F32ToBf16(din.get(), stride, rows, cols, out.get(), nullptr));
  EXPECT_EQ(out.Host(), want);
}

TEST(CudaKernelsTest, PrepareQkMatchesTheCpuSequence) {
  FLOE_REQUIRE_CUDA_DEVICE();
  const int rows = 7, heads = 4, kv_heads = 2, hd = 64, half = hd / 2;
  const int width = (heads + 2 * kv_heads) * hd;
  const std::vector<float> qkv = Random(rows * width, 21);
  const std::vector<float> bias = Random(width, 22, 0.1f);
  std::vector<float> qn = Random(hd, 23, 0.1f), kn = Random(hd, 24, 0.1f);
  for (float& v : qn) v += 1.0f;
  for (float& v : kn) v += 1.0f;
  cpu::RopeParams rope;
  rope.head_dim = hd;
  rope.theta = 500000.0f;
  rope.scaling_type = "llama3";
  rope.factor = 32.0f;
  const std::vector<float> inv_freq = cpu::RopeInvFreq(rope);
  std::vector<float> cos(rows * half), sin(rows * half);
  for (int r = 0; r < rows; ++r) cpu::RopeCosSin(inv_freq, 1000 * r + 3, &cos[r * half], &sin[r * half]);
  std::vector<float> want = qkv;
  for (int r = 0; r < rows; ++r) {
    float* row = &want[r * width];
    cpu::AddInPlace(row, bias.data(), width);
    for (int h = 0; h < heads; ++h) cpu::RmsNorm(row + h * hd, qn.data(), 1e-6f, hd, row + h * hd);
    for (int h = 0; h < kv_heads; ++h) cpu::RmsNorm(row + (heads + h) * hd, kn.data(), 1e-6f, hd, row + (heads + h) * hd);
    cpu::ApplyRope(row, heads, hd, &cos[r * half], &sin[r * half]);
    cpu::ApplyRope(row + heads * hd, kv_heads, hd, &cos[r * half], &sin[r * half]);
  }
  DeviceVec<float> d(qkv), db(bias), dqn(qn), dkn(kn), dcos(cos), dsin(sin);
  ASSERT_CUDA(cuda::PrepareQk(d.get(), rows, heads, kv_heads, hd, db.get(), dqn.get(), dkn.get(), 1e-6f, dcos.get(),
                              dsin.get(), nullptr));
  ExpectNear(d.Host(), want, 1e-5f, "PrepareQk");
  // ApplyRope alone on the k heads at a row stride.
  std::vector<float> want_rope = qkv;
  for (int r = 0; r < rows; ++r) cpu::ApplyRope(&want_rope[r * width], kv_heads, hd, &cos[r * half], &sin[r * half]);
  DeviceVec<float> d2(qkv);
  ASSERT_CUDA(cuda::ApplyRope(d2.get(), width, rows, kv_heads, hd, dcos.get(), dsin.get(), nullptr));
  ExpectNear(d2.Host(), want_rope, 1e-5f, "ApplyRope");
}

// A chain sequence (a prefill over cached context), a decode, and a tree, in
// one step: the KV writes and the attention against the CPU kernels.
TEST(CudaKernelsTest, PagedAttentionMatchesTheCpuOnChainsAndTrees) {
  FLOE_REQUIRE_CUDA_DEVICE();
  for (int hd : {16, 64, 128}) {
    const int heads = 8, kv_heads = 2, bs = 4, blocks = 64;
    const int kv_dim = kv_heads * hd, q_dim = heads * hd, width = q_dim + 2 * kv_dim;
    // Sequences: A 9 new tokens at 5 (chain); B one token at 30; C a tree of
    // 5 at 12 (parents -1, 0, 0, 1, 2); D a 2-token prompt (contexts of 1
    // and 2 keys: warps without a key).
    const std::vector<int32_t> table_a = {10, 3, 7, 1}, table_b = {20, 21, 22, 23, 24, 25, 26, 27, 28},
                               table_c = {40, 41, 42, 43, 44}, table_d = {50};
    const std::vector<int32_t> parents_c = {-1, 0, 0, 1, 2};
    struct Seq {
      const std::vector<int32_t>* table;
      int32_t start, n;
      bool tree;
    };
    const Seq seqs[] = {{&table_a, 5, 9, false}, {&table_b, 30, 1, false}, {&table_c, 12, 5, true},
                        {&table_d, 0, 2, false}};
    const int rows = 17;
    // The context already cached: every slot of every block random.
    const int64_t array = static_cast<int64_t>(blocks) * kv_heads * bs * hd;
    std::vector<float> cache_k = Random(array, hd), cache_v = Random(array, hd + 1);
    const std::vector<float> qkv = Random(rows * width, hd + 2);
    // CPU.
    std::vector<cpu::AttentionSeq> cpu_seqs;
    std::vector<int32_t> tree_begin, tree_paths;
    cpu::AppendTreePaths(parents_c, 12, tree_begin, tree_paths);
    int64_t first = 0;
    for (const Seq& s : seqs) {
      cpu::AttentionSeq a;
      a.first_row = first;
      a.num_tokens = s.n;
      a.start_pos = s.start;
      a.block_table = s.table->data();
      if (s.tree) {
        a.tree_path_begin = tree_begin.data();
        a.tree_paths = tree_paths.data();
      }
      cpu_seqs.push_back(a);
      first += s.n;
    }
    std::vector<float> ck = cache_k, cv = cache_v, want(rows * q_dim);
    cpu::KvLayer kv{ck.data(), cv.data(), bs, kv_heads, hd};
    cpu::WriteKv(kv, cpu_seqs, qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, width);
    cpu::ThreadPool pool(2);
    std::vector<float> scratch(2 * 64 * cpu::kAttentionScratchRows);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    cpu::PagedAttention(qkv.data(), width, cpu_seqs, kv, heads, scale, want.data(), q_dim, scratch.data(),
                        64 * cpu::kAttentionScratchRows, pool);
    // CUDA: the same layout as the backend builds it.
    std::vector<int32_t> write_pos, table_at, context, path_begin, path_end, tables;
    for (const Seq& s : seqs) {
      const int32_t at = static_cast<int32_t>(tables.size());
      tables.insert(tables.end(), s.table->begin(), s.table->end());
      for (int32_t i = 0; i < s.n; ++i) {
        write_pos.push_back(s.start + i);
        table_at.push_back(at);
        context.push_back(s.tree ? s.start : s.start + i + 1);
        path_begin.push_back(s.tree ? tree_begin[i] : 0);
        path_end.push_back(s.tree ? tree_begin[i + 1] : 0);
      }
    }
    DeviceVec<int32_t> d_write(write_pos), d_table(table_at), d_context(context), d_begin(path_begin),
        d_end(path_end), d_tables(tables), d_paths(tree_paths);
    cuda::StepLayout layout{rows, d_write.get(), d_table.get(), d_context.get(), d_begin.get(), d_end.get(),
                            d_tables.get(), d_paths.get()};
    DeviceVec<float> dk(cache_k), dv(cache_v), dq(qkv), dout(std::vector<float>(rows * q_dim));
    cuda::PagedKv dkv{dk.get(), dv.get(), bs, kv_heads, hd};
    ASSERT_CUDA(cuda::WriteKv(dkv, layout, dq.get() + q_dim, dq.get() + q_dim + kv_dim, width, nullptr));
    EXPECT_EQ(dk.Host(), ck) << "head_dim " << hd;
    EXPECT_EQ(dv.Host(), cv) << "head_dim " << hd;
    ASSERT_CUDA(cuda::PagedAttention(dq.get(), width, layout, dkv, heads, scale, dout.get(), q_dim, 1, nullptr, 0,
                                     nullptr));
    ExpectNear(dout.Host(), want, 1e-4f, "PagedAttention");
    // Split-K over the same keys (splits with no key included: C's tree
    // rows have 12 to 15 keys).
    for (int splits : {2, 5, 16}) {
      DeviceVec<float> work(std::vector<float>(cuda::PagedAttentionWorkspace(rows, heads, hd, splits)));
      DeviceVec<float> dsplit(std::vector<float>(rows * q_dim));
      ASSERT_CUDA(cuda::PagedAttention(dq.get(), width, layout, dkv, heads, scale, dsplit.get(), q_dim, splits,
                                       work.get(), cuda::PagedAttentionWorkspace(rows, heads, hd, splits), nullptr));
      ExpectNear(dsplit.Host(), want, 1e-4f, "PagedAttention split-K");
    }

    // CopyKvSlots: in order, the second copy reading the first's destination.
    const std::vector<int32_t> copies = {10, 1, 11, 2, 11, 2, 12, 0};
    std::vector<float> both = ck;
    both.insert(both.end(), cv.begin(), cv.end());
    std::vector<float> want_copy = both;
    for (int c = 0; c < 2; ++c) {
      for (int arr = 0; arr < 2; ++arr) {
        for (int h = 0; h < kv_heads; ++h) {
          const int32_t* e = &copies[4 * c];
          const int64_t src = arr * array + ((static_cast<int64_t>(e[0]) * kv_heads + h) * bs + e[1]) * hd;
          const int64_t dst = arr * array + ((static_cast<int64_t>(e[2]) * kv_heads + h) * bs + e[3]) * hd;
          std::copy(want_copy.begin() + src, want_copy.begin() + src + hd, want_copy.begin() + dst);
        }
      }
    }
    DeviceVec<float> d_both(both);
    DeviceVec<int32_t> d_copies(copies);
    ASSERT_CUDA(cuda::CopyKvSlots(d_both.get(), cuda::KvDtype::kF32, array, 2, bs, kv_heads, hd, d_copies.get(), 2,
                                  nullptr));
    EXPECT_EQ(d_both.Host(), want_copy) << "head_dim " << hd;
  }
}

// Split-K where it is meant for: two decode rows over 700 and 1,000 cached
// keys, against the CPU and against one split.
TEST(CudaKernelsTest, SplitKAttentionMatchesOnLongContexts) {
  FLOE_REQUIRE_CUDA_DEVICE();
  const int heads = 8, kv_heads = 2, hd = 128, bs = 16, blocks = 128;
  const int kv_dim = kv_heads * hd, q_dim = heads * hd, width = q_dim + 2 * kv_dim;
  std::vector<int32_t> table_a(64), table_b(64);
  for (int i = 0; i < 64; ++i) {
    table_a[i] = 2 * i + 1;
    table_b[i] = 126 - 2 * i;
  }
  const int64_t array = static_cast<int64_t>(blocks) * kv_heads * bs * hd;
  const std::vector<float> cache_k = Random(array, 41), cache_v = Random(array, 42), qkv = Random(2 * width, 43);
  const int32_t starts[] = {700, 1000};
  std::vector<cpu::AttentionSeq> seqs(2);
  for (int s = 0; s < 2; ++s) {
    seqs[s].first_row = s;
    seqs[s].num_tokens = 1;
    seqs[s].start_pos = starts[s];
    seqs[s].block_table = s == 0 ? table_a.data() : table_b.data();
  }
  std::vector<float> ck = cache_k, cv = cache_v, want(2 * q_dim);
  cpu::KvLayer kv{ck.data(), cv.data(), bs, kv_heads, hd};
  cpu::WriteKv(kv, seqs, qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, width);
  cpu::ThreadPool pool(2);
  std::vector<float> scratch(2 * 1024 * cpu::kAttentionScratchRows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  cpu::PagedAttention(qkv.data(), width, seqs, kv, heads, scale, want.data(), q_dim, scratch.data(),
                        1024 * cpu::kAttentionScratchRows, pool);
  std::vector<int32_t> tables = table_a;
  tables.insert(tables.end(), table_b.begin(), table_b.end());
  DeviceVec<int32_t> d_write(std::vector<int32_t>{700, 1000}), d_table(std::vector<int32_t>{0, 64}),
      d_context(std::vector<int32_t>{701, 1001}), d_zero(std::vector<int32_t>{0, 0}), d_tables(tables);
  cuda::StepLayout layout{2, d_write.get(), d_table.get(), d_context.get(), d_zero.get(), d_zero.get(), d_tables.get(),
                          nullptr};
  DeviceVec<float> dk(cache_k), dv(cache_v), dq(qkv);
  cuda::PagedKv dkv{dk.get(), dv.get(), bs, kv_heads, hd};
  ASSERT_CUDA(cuda::WriteKv(dkv, layout, dq.get() + q_dim, dq.get() + q_dim + kv_dim, width, nullptr));
  for (int splits : {1, 3, 8, 64}) {
    const int64_t floats = cuda::PagedAttentionWorkspace(2, heads, hd, splits);
    DeviceVec<float> work{std::vector<float>(floats)}, out{std::vector<float>(2 * q_dim)};
    ASSERT_CUDA(cuda::PagedAttention(dq.get(), width, layout, dkv, heads, scale, out.get(), q_dim, splits, work.get(),
                                     floats, nullptr));
    ExpectNear(out.Host(), want, 1e-4f, "split-K attention");
  }
}

// A step of two prompt runs (77 rows after 40 cached tokens; 20 rows from
// position 0) and one decode row: the runs through PrefillAttention's tiles
// (a last tile of 13 and of 20 rows), the decode row through PagedAttention's
// subset, split and not; all against cpu::PagedAttention (1e-4).
TEST(CudaKernelsTest, PrefillTilesAndDecodeSubsetMatchTheCpu) {
  FLOE_REQUIRE_CUDA_DEVICE();
  for (int hd : {128, 72}) {
    const int heads = 8, kv_heads = 2, bs = 16, blocks = 64;
    const int kv_dim = kv_heads * hd, q_dim = heads * hd, width = q_dim + 2 * kv_dim;
    struct Seq {
      int rows, start;
    };
    const Seq shape[] = {{77, 40}, {1, 500}, {20, 0}};
    std::vector<std::vector<int32_t>> tables(3);
    for (int s = 0; s < 3; ++s) {
      for (int b = 0; b < 40; ++b) tables[s].push_back((b * 3 + s * 11) % blocks);
    }
    // Distinct blocks per sequence where they are written.
    tables[0] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    tables[2] = {20, 21};
    for (int b = 0; b < 40; ++b) tables[1][b] = 30 + b % 34;
    const int rows = 98;
    const int64_t array = static_cast<int64_t>(blocks) * kv_heads * bs * hd;
    const std::vector<float> cache_k = Random(array, 51), cache_v = Random(array, 52), qkv = Random(rows * width, 53);
    std::vector<cpu::AttentionSeq> seqs(3);
    std::vector<int32_t> write, table_of, context, flat, decode_rows, tiles;
    int row = 0;
    for (int s = 0; s < 3; ++s) {
      seqs[s].first_row = row;
      seqs[s].num_tokens = shape[s].rows;
      seqs[s].start_pos = shape[s].start;
      seqs[s].block_table = tables[s].data();
      const int32_t offset = static_cast<int32_t>(flat.size());
      flat.insert(flat.end(), tables[s].begin(), tables[s].end());
      for (int i = 0; i < shape[s].rows; ++i) {
        write.push_back(shape[s].start + i);
        table_of.push_back(offset);
        context.push_back(shape[s].start + i + 1);
      }
      if (shape[s].rows == 1) {
        decode_rows.push_back(row);
      } else {
        for (int first = 0; first < shape[s].rows; first += cuda::kPrefillTileRows)
          tiles.insert(tiles.end(), {row + first, std::min(cuda::kPrefillTileRows, shape[s].rows - first)});
      }
      row += shape[s].rows;
    }
    std::vector<float> ck = cache_k, cv = cache_v, want(rows * q_dim);
    cpu::KvLayer kv{ck.data(), cv.data(), bs, kv_heads, hd};
    cpu::WriteKv(kv, seqs, qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, width);
    cpu::ThreadPool pool(2);
    std::vector<float> scratch(2 * 1024 * cpu::kAttentionScratchRows);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    cpu::PagedAttention(qkv.data(), width, seqs, kv, heads, scale, want.data(), q_dim, scratch.data(),
                        1024 * cpu::kAttentionScratchRows, pool);
    const std::vector<int32_t> zeros(rows, 0);
    DeviceVec<int32_t> d_write(write), d_table(table_of), d_context(context), d_zero(zeros), d_tables(flat),
        d_subset(decode_rows), d_tiles(tiles);
    cuda::StepLayout layout{rows, d_write.get(), d_table.get(), d_context.get(), d_zero.get(), d_zero.get(),
                            d_tables.get(), nullptr};
    DeviceVec<float> dk(cache_k), dv(cache_v), dq(qkv);
    cuda::PagedKv dkv{dk.get(), dv.get(), bs, kv_heads, hd};
    ASSERT_CUDA(cuda::WriteKv(dkv, layout, dq.get() + q_dim, dq.get() + q_dim + kv_dim, width, nullptr));
    layout.subset = d_subset.get();
    layout.subset_rows = static_cast<int>(decode_rows.size());
    for (int splits : {1, 4}) {
      const int64_t floats = cuda::PagedAttentionWorkspace(layout.subset_rows, heads, hd, splits);
      DeviceVec<float> work{std::vector<float>(floats)}, out{std::vector<float>(rows * q_dim, 7.0f)};
      ASSERT_CUDA(cuda::PrefillAttention(dq.get(), width, layout, dkv, heads, scale, out.get(), q_dim, d_tiles.get(),
                                         static_cast<int>(tiles.size() / 2), nullptr));
      ASSERT_CUDA(cuda::PagedAttention(dq.get(), width, layout, dkv, heads, scale, out.get(), q_dim, splits,
                                       work.get(), floats, nullptr));
      ExpectNear(out.Host(), want, 1e-4f, hd == 128 ? "prefill tiles, head_dim 128" : "prefill tiles, head_dim 72");
    }
  }
}

// A narrow KV cache on both sides, the same dtype: bf16, and fp8 e4m3 with
// per-tensor scales (not powers of two). Context already cached (the CPU's
// codes), then a step of a 45-row prompt after 20 cached tokens
// (PrefillAttention's tiles), a decode row at 300 and a 5-token tree at 12
// (PagedAttention's subset, split and not): WriteKv writes the CPU's codes
// byte for byte, the outputs agree to 1e-4, CopyKvSlots moves codes.
struct CudaNarrowKv {
  cpu::KvDtype cpu;
  cuda::KvDtype cuda;
  float k_scale, v_scale;
};

class CudaNarrowKvTest : public ::testing::TestWithParam<CudaNarrowKv> {};

INSTANTIATE_TEST_SUITE_P(KvDtypes, CudaNarrowKvTest,
                         ::testing::Values(CudaNarrowKv{cpu::KvDtype::kBf16, cuda::KvDtype::kBf16, 1.0f, 1.0f},
                                           CudaNarrowKv{cpu::KvDtype::kFp8E4m3, cuda::KvDtype::kFp8E4m3, 0.37f,
                                                        0.21f}));

TEST_P(CudaNarrowKvTest, MatchesTheCpuOnTheSameDtype) {
  FLOE_REQUIRE_CUDA_DEVICE();
  const CudaNarrowKv narrow = GetParam();
  const int heads = 8, kv_heads = 2, hd = 128, bs = 16, blocks = 48;
  const int kv_dim = kv_heads * hd, q_dim = heads * hd, width = q_dim + 2 * kv_dim;
  const size_t elem = cpu::KvElementBytes(narrow.cpu);
  const int64_t array = static_cast<int64_t>(blocks) * kv_heads * bs * hd;
  // Tables: the prompt's blocks 0..4, the decode row's 10..28, the tree's 40..41.
  std::vector<int32_t> table_a = {0, 1, 2, 3, 4}, table_b, table_c = {40, 41};
  for (int b = 0; b < 19; ++b) table_b.push_back(10 + b);
  std::vector<int32_t> parents = {-1, 0, 0, 1, 2}, tree_begin, tree_paths;
  cpu::AppendTreePaths(parents, 12, tree_begin, tree_paths);
  std::vector<cpu::AttentionSeq> seqs = {{0, 45, 20, table_a.data()},
                                         {45, 1, 300, table_b.data()},
                                         {46, 5, 12, table_c.data(), tree_begin.data(), tree_paths.data()}};
  const int rows = 51;
  std::vector<uint8_t> ck(array * elem), cv(array * elem);
  cpu::KvLayer kv{ck.data(), cv.data(), bs, kv_heads, hd, narrow.cpu, narrow.k_scale, narrow.v_scale};
  for (int s = 0; s < 3; ++s) {  // each sequence's context, through the CPU's writes
    const int start = seqs[s].start_pos;
    const std::vector<float> k = Random(start * kv_dim, 60 + s, 2.0f), v = Random(start * kv_dim, 70 + s, 2.0f);
    const std::vector<cpu::AttentionSeq> past = {{0, start, 0, seqs[s].block_table}};
    cpu::WriteKv(kv, past, k.data(), v.data(), kv_dim);
  }
  const std::vector<uint8_t> cached_k = ck, cached_v = cv;
  const std::vector<float> qkv = Random(rows * width, 81, 2.0f);
  cpu::WriteKv(kv, seqs, qkv.data() + q_dim, qkv.data() + q_dim + kv_dim, width);
  cpu::ThreadPool pool(2);
  std::vector<float> scratch(2 * 320 * cpu::kAttentionScratchRows), want(rows * q_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  cpu::PagedAttention(qkv.data(), width, seqs, kv, heads, scale, want.data(), q_dim, scratch.data(),
                      320 * cpu::kAttentionScratchRows, pool);
  // The device step: tiles over the prompt, the other rows as the subset.
  std::vector<int32_t> write, table_of, context, begin, end, flat, subset, tiles;
  for (int s = 0; s < 3; ++s) {
    const int32_t offset = static_cast<int32_t>(flat.size());
    const std::vector<int32_t>& t = s == 0 ? table_a : s == 1 ? table_b : table_c;
    flat.insert(flat.end(), t.begin(), t.end());
    for (int i = 0; i < seqs[s].num_tokens; ++i) {
      const int row = static_cast<int>(seqs[s].first_row) + i;
      write.push_back(seqs[s].start_pos + i);
      table_of.push_back(offset);
      const bool tree = s == 2;
      context.push_back(tree ? seqs[s].start_pos : seqs[s].start_pos + i + 1);
      begin.push_back(tree ? tree_begin[i] : 0);
      end.push_back(tree ? tree_begin[i + 1] : 0);
      if (s != 0) subset.push_back(row);
    }
  }
  for (int first = 0; first < 45; first += cuda::kPrefillTileRows)
    tiles.insert(tiles.end(), {first, std::min(cuda::kPrefillTileRows, 45 - first)});
  DeviceVec<int32_t> d_write(write), d_table(table_of), d_context(context), d_begin(begin), d_end(end),
      d_tables(flat), d_paths(tree_paths), d_subset(subset), d_tiles(tiles);
  cuda::StepLayout layout{rows, d_write.get(), d_table.get(), d_context.get(), d_begin.get(), d_end.get(),
                          d_tables.get(), d_paths.get()};
  DeviceVec<uint8_t> dk(cached_k), dv(cached_v);
  DeviceVec<float> dq(qkv);
  cuda::PagedKv dkv{dk.get(), dv.get(), bs, kv_heads, hd, narrow.cuda, narrow.k_scale, narrow.v_scale};
  ASSERT_CUDA(cuda::WriteKv(dkv, layout, dq.get() + q_dim, dq.get() + q_dim + kv_dim, width, nullptr));
  EXPECT_EQ(dk.Host(), ck) << "the device's K codes are not the CPU's";
  EXPECT_EQ(dv.Host(), cv) << "the device's V codes are not the CPU's";
  layout.subset = d_subset.get();
  layout.subset_rows = static_cast<int>(subset.size());
  for (int splits : {1, 4}) {
    const int64_t floats = cuda::PagedAttentionWorkspace(layout.subset_rows, heads, hd, splits);
    DeviceVec<float> work{std::vector<float>(std::max<int64_t>(floats, 1))};
    DeviceVec<float> out{std::vector<float>(rows * q_dim, 7.0f)};
    ASSERT_CUDA(cuda::PrefillAttention(dq.get(), width, layout, dkv, heads, scale, out.get(), q_dim, d_tiles.get(),
                                       static_cast<int>(tiles.size() / 2), nullptr));
    ASSERT_CUDA(cuda::PagedAttention(dq.get(), width, layout, dkv, heads, scale, out.get(), q_dim, splits,
                                     work.get(), floats, nullptr));
    ExpectNear(out.Host(), want, 1e-4f, "narrow KV attention");
  }
  // CopyKvSlots moves codes: block 10 slot 1 to block 44 slot 2, in K and V.
  std::vector<uint8_t> both = ck;
  both.insert(both.end(), cv.begin(), cv.end());
  std::vector<uint8_t> want_copy = both;
  for (int arr = 0; arr < 2; ++arr) {
    for (int h = 0; h < kv_heads; ++h) {
      const int64_t src = (arr * array + ((10LL * kv_heads + h) * bs + 1) * hd) * elem;
      const int64_t dst = (arr * array + ((44LL * kv_heads + h) * bs + 2) * hd) * elem;
      std::copy(want_copy.begin() + src, want_copy.begin() + src + hd * elem, want_copy.begin() + dst);
    }
  }
  DeviceVec<uint8_t> d_both(both);
  DeviceVec<int32_t> d_copies(std::vector<int32_t>{10, 1, 44, 2});
  ASSERT_CUDA(cuda::CopyKvSlots(d_both.get(), narrow.cuda, array, 2, bs, kv_heads, hd, d_copies.get(), 1, nullptr));
  EXPECT_EQ(d_both.Host(), want_copy);
}

TEST(CudaKernelsTest, CounterUniformsAreTheHostGeneratorsBitForBit) {
  FLOE_REQUIRE_CUDA_DEVICE();
  std::vector<uint64_t> positions(10000);
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = i * 7919 + (i % 3 == 0 ? (1ULL << 40) : 0);
  DeviceVec<uint64_t> d_positions(positions);
  for (uint64_t seed : {0ULL, 1ULL, 0xdeadbeefcafef00dULL}) {
    DeviceVec<float> out(std::vector<float>(positions.size()));
    ASSERT_CUDA(cuda::CounterUniforms(seed, d_positions.get(), static_cast<int>(positions.size()), out.get(), nullptr));
    const std::vector<float> got = out.Host();
    for (size_t i = 0; i < positions.size(); ++i) ASSERT_EQ(got[i], CounterUniform(seed, positions[i])) << i;
  }
}

// SampleRows against Sampler::Sample on the same logits: greedy exactly;
// seeded draws equal but for a draw at a rounding margin (at most 0.5% of
// rows); declines only where the CPU would need more than
// kMaxSampleCandidates candidates.
TEST(CudaKernelsTest, SampleRowsDrawsTheCpuSamplersTokens) {
  FLOE_REQUIRE_CUDA_DEVICE();
  struct Setting {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  const Setting settings[] = {{0, 0, 1, 0},     {1.0f, 0, 1, 0},     {0.7f, 1, 1, 0},    {0.7f, 5, 1, 0},
                              {1.3f, 50, 1, 0}, {0.8f, 0, 0.9f, 0},  {0.8f, 0, 0.5f, 0}, {1.0f, 0, 1, 0.1f},
                              {0.9f, 40, 0.95f, 0.05f}, {1.0f, 3000, 1, 0}, {0.6f, 2048, 0.9f, 0},
                              {1.0f, 0, 0.95f, 0.1f},  {0.8f, 1500, 1, 0},  {1.0f, 256, 1, 0}};
  for (int vocab : {50, 1000, 1024, 1500, 128256}) {
    for (float scale : {1.0f, 6.0f}) {  // flat and peaked rows
      const int rows = 64;
      std::vector<float> logits = Random(static_cast<size_t>(rows) * vocab, vocab + static_cast<int>(scale), scale);
      // Ties: row 1 all equal, row 2 two equal maxima, row 3 300 equal
      // maxima (a top-k window's boundary falls among them).
      std::fill(logits.begin() + vocab, logits.begin() + 2 * vocab, 0.5f);
      logits[2 * vocab + 7] = logits[2 * vocab + 3] = 100.0f;
      for (int i = 0; i < std::min(vocab, 300); ++i) logits[3 * vocab + (i * 7) % vocab] = 50.0f;
      std::vector<cuda::SampleParams> params;
      for (int r = 0; r < rows; ++r) {
        for (const Setting& s : settings) {
          cuda::SampleParams p;
          p.row = r;
          p.temperature = s.temperature;
          p.top_k = s.top_k;
          p.top_p = s.top_p;
          p.min_p = s.min_p;
          p.seed = 1234 + r;
          p.position = params.size();
          params.push_back(p);
        }
      }
      DeviceVec<float> d_logits(logits);
      DeviceVec<cuda::SampleParams> d_params(params);
      DeviceVec<int32_t> d_tokens(std::vector<int32_t>(params.size(), -9));
      ASSERT_CUDA(cuda::SampleRows(d_logits.get(), vocab, vocab, d_params.get(), static_cast<int>(params.size()),
                                   d_tokens.get(), nullptr));
      ASSERT_CUDA(static_cast<int>(cudaDeviceSynchronize()));
      const std::vector<int32_t> got = d_tokens.Host();
      int drawn = 0, mismatches = 0, declined = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        const cuda::SampleParams& p = params[i];
        SamplingOptions options;
        options.temperature = p.temperature;
        options.top_k = p.top_k;
        options.top_p = p.top_p;
        options.min_p = p.min_p;
        options.seed = p.seed;
        SamplingContext context;
        context.output_position = static_cast<int64_t>(p.position);
        std::vector<float> row(logits.begin() + static_cast<size_t>(p.row) * vocab,
                               logits.begin() + static_cast<size_t>(p.row + 1) * vocab);
        const int32_t want = Sampler::Sample(options, context, row);
        SCOPED_TRACE(testing::Message() << "vocab " << vocab << " scale " << scale << " row " << p.row << " T "
                                        << p.temperature << " k " << p.top_k << " p " << p.top_p << " min_p "
                                        << p.min_p);
        if (std::min(p.top_k, vocab) > cuda::kMaxSampleCandidates) {
          EXPECT_EQ(got[i], -1);
          continue;
        }
        if (got[i] == -1) {
          ++declined;
          // Only a truncation without top-k over a vocabulary wider than the window.
          EXPECT_TRUE(p.top_k == 0 && vocab > cuda::kMaxSampleCandidates);
          continue;
        }
        ASSERT_GE(got[i], 0);
        ASSERT_LT(got[i], vocab);
        if (p.temperature == 0.0f) {
          EXPECT_EQ(got[i], want);
        } else {
          ++drawn;
          mismatches += got[i] != want;
        }
      }
      std::printf("[sample_rows] vocab %6d scale %.0f: %d drawn, %d off the CPU's token, %d declined\n", vocab,
                  scale, drawn, mismatches, declined);
      EXPECT_LE(mismatches * 200, drawn + 200) << "more than 0.5% of draws (+1) differ";
    }
  }
}

TEST(CudaKernelsTest, LaunchersRefuseBadArguments) {
  // No device needed: the launchers check before they launch.
  EXPECT_NE(cuda::EmbedRows(nullptr, cuda::Dtype::kF32, nullptr, 1, 1, nullptr, nullptr), 0);
  EXPECT_NE(cuda::PrepareQk(nullptr, 1, 1, 1, 3, nullptr, nullptr, nullptr, 0, nullptr, nullptr, nullptr), 0);
  EXPECT_NE(cuda::F32ToBf16(nullptr, 1, 1, 2, nullptr, nullptr), 0);
  cuda::PagedKv kv{reinterpret_cast<float*>(16), reinterpret_cast<float*>(16), 4, 2, 512};  // head_dim > 256
  cuda::StepLayout step;
  EXPECT_NE(cuda::PagedAttention(nullptr, 0, step, kv, 2, 1.0f, nullptr, 0, 1, nullptr, 0, nullptr), 0);
  // Split-K without a workspace large enough.
  float* any = reinterpret_cast<float*>(16);
  const int32_t* ids = reinterpret_cast<const int32_t*>(16);
  cuda::StepLayout one{1, ids, ids, ids, ids, ids, ids, nullptr};
  cuda::PagedKv small{any, any, 4, 2, 64};
  EXPECT_NE(cuda::PagedAttention(any, 128, one, small, 2, 1.0f, any, 128, 4, any,
                                 cuda::PagedAttentionWorkspace(1, 2, 64, 4) - 1, nullptr),
            0);
  EXPECT_NE(cuda::PagedAttention(any, 128, one, small, 2, 1.0f, any, 128, cuda::kMaxSplits + 1, any, 1 << 30,
                                 nullptr),
            0);
  EXPECT_EQ(cuda::AddF32(nullptr, nullptr, 0, nullptr), static_cast<int>(cudaErrorInvalidValue));
  EXPECT_NE(cuda::SampleRows(any, 10, 20, nullptr, 1, nullptr, nullptr), 0);  // stride < vocab
  EXPECT_NE(cuda::SampleRows(nullptr, 20, 20, nullptr, 1, nullptr, nullptr), 0);
  // Scales other than 1 on a cache that is not fp8; an fp8 scale of 0.
  cuda::PagedKv scaled{any, any, 4, 2, 64, cuda::KvDtype::kBf16, 0.5f, 1.0f};
  EXPECT_NE(cuda::PagedAttention(any, 128, one, scaled, 2, 1.0f, any, 128, 1, nullptr, 0, nullptr), 0);
  cuda::PagedKv zero{any, any, 4, 2, 64, cuda::KvDtype::kFp8E4m3, 0.0f, 1.0f};
  EXPECT_NE(cuda::WriteKv(zero, one, any, any, 128, nullptr), 0);
}

}  // namespace
}  // namespace floe
