// CPU backend throughput on dummy (seeded random bf16) weights in real model
// shapes: prefill tokens/s (one 512-token prompt), aggregate decode tokens/s at
// batch 1/4/16 (128-token prompts, then 128 decode steps), and the tiny
// model's batch-1 decode. Medians over repetitions after a warm-up; each
// repetition is preceded by a memory-bandwidth canary (2-thread read of a 1 GiB
// buffer), since the machine is shared and noisy. The roofs are measured in the
// same run: a peak probe of the instruction the bf16 matmuls use (vdpbf16ps
// where the kernels use it, else f32 FMA at the SIMD width the CPU has) and
// the bandwidth canary; the JSON states each case's roof and the fraction
// reached.
// JSON on stdout.
//
// Usage: bench_cpu_forward [--threads N] [--reps N] [--steps N] [--only NAME]
//                          [--simd avx2]
//   NAME: prefill | decode1 | decode4 | decode16 | tiny
//   --simd avx2: run the kernels' AVX2 code path on an AVX-512 machine (to
//   measure the other machine type this project runs on).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"
#include "hwy/targets.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/checkpoint_writer.h"
#include "bench/engine/bench_timing.h"
#include "bench/engine/forward_bench.h"
#include "bench/engine/dummy_model.h"

namespace floe {
namespace {

// GB/s of `threads` threads summing disjoint halves of a 1 GiB buffer.
double BandwidthCanary(int threads) {
  static std::vector<uint64_t> buf = [] {
    std::vector<uint64_t> b((1ull << 30) / 8);
    for (size_t i = 0; i < b.size(); i += 512) b[i] = i;
    return b;
  }();
  std::vector<uint64_t> sums(threads);
  const double t0 = Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t begin = buf.size() * t / threads, end = buf.size() * (t + 1) / threads;
      uint64_t a = 0, b = 0, c = 0, d = 0;
      for (size_t i = begin; i + 4 <= end; i += 4) {
        a += buf[i];
        b += buf[i + 1];
        c += buf[i + 2];
        d += buf[i + 3];
      }
      sums[t] = a + b + c + d;
    });
  }
  for (auto& th : pool) th.join();
  const double dt = Now() - t0;
  if (sums[0] == 42) std::fprintf(stderr, " ");
  return (1ull << 30) / dt / 1e9;
}

// 12 independent FMA chains per thread (more than latency x throughput on
// current x86 cores), so the loop runs at the FMA pipes' peak. One body for
// both widths; the target attribute picks the instruction set.
#define FLOE_FMA_LOOP(V, SET, FMA, FIRST)                            \
  V acc[12];                                                         \
  _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) acc[i] = SET(1.0f + i * 1e-3f); \
  const V a = SET(0.999999f), b = SET(1e-7f);                        \
  for (int64_t it = 0; it < iters; ++it) {                           \
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) {          \
      acc[i] = FMA(acc[i], a, b);                                    \
      asm volatile("" : "+v"(acc[i]));                               \
    }                                                                \
  }                                                                  \
  float sink = 0;                                                    \
  _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) sink += FIRST(acc[i]); \
  return sink;

__attribute__((target("avx2,fma"))) double FmaLoop256(int64_t iters) {
  FLOE_FMA_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_cvtss_f32)
}
__attribute__((target("avx512f"))) double FmaLoop512(int64_t iters) {
  FLOE_FMA_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_cvtss_f32)
}
// vdpbf16ps: 16 lanes x 2 products, 4 FLOPs per lane. 24 chains: with 12 the
// probe read half of what prefill reaches on Zen 4 (the dot product's latency
// is longer than an FMA's), so the "roof" was below the measured rate.
__attribute__((target("avx512f,avx512bf16"))) double DotLoop512(int64_t iters) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(0.999f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(1e-7f));
  __m512 acc[24];
  _Pragma("GCC unroll 24") for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  for (int64_t it = 0; it < iters; ++it) {
    _Pragma("GCC unroll 24") for (int i = 0; i < 24; ++i) {
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      asm volatile("" : "+v"(acc[i]));
    }
  }
  float sink = 0;
  _Pragma("GCC unroll 24") for (int i = 0; i < 24; ++i) sink += _mm512_cvtss_f32(acc[i]);
  return sink;
}
#undef FLOE_FMA_LOOP

enum class PeakKind { kFma256, kFma512, kBf16Dot512 };

// GFLOP/s of `threads` threads each running independent chains of `kind`.
double Peak(int threads, PeakKind kind) {
  constexpr int64_t kIters = 20'000'000;
  std::vector<double> sinks(threads);
  const double t0 = Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      sinks[t] = kind == PeakKind::kFma256   ? FmaLoop256(kIters)
                 : kind == PeakKind::kFma512 ? FmaLoop512(kIters)
                                             : DotLoop512(kIters);
    });
  }
  for (auto& th : pool) th.join();
  const double dt = Now() - t0;
  if (sinks[0] == 42) std::fprintf(stderr, " ");
  const double flops_per_op = kind == PeakKind::kFma256 ? 16 : kind == PeakKind::kFma512 ? 32 : 64;
  return static_cast<double>(threads) * kIters * (kind == PeakKind::kBf16Dot512 ? 24 : 12) * flops_per_op / dt / 1e9;
}

struct Options {
  int threads = 2;
  int reps = 3;
  int steps = 128;
  std::string only;
  std::string simd;  // "" (best the CPU has) or "avx2"
  std::string kv_cache_dtype = "f32";
  int context = 0;  // > 0: decode cases at this context (synthetic: no prefill timed)
};

struct Result {
  std::string name;
  std::vector<double> rates, canaries;
  double compute_roof = 0, bandwidth_roof = 0;  // tok/s at the matmuls' measured peak / median canary
};

struct Peaks {
  std::string simd_target;
  int lanes = 8;
  double fma_gflops_1t = 0, fma_gflops = 0;  // median of 3 probes, 1 thread and opt.threads
  bool bf16_dot = false;                     // the bf16 matmuls use vdpbf16ps
  double dot_gflops = 0;                     // its peak on opt.threads (bf16_dot only)
  double matmul_gflops() const { return bf16_dot ? dot_gflops : fma_gflops; }
};

std::string Json(const std::vector<Result>& results, const Options& opt, double load,
                 const Peaks& peaks) {
  std::string out = absl::StrCat(
      "{\n  \"threads\": ", opt.threads, ",\n  \"reps\": ", opt.reps, ",\n  \"decode_steps\": ",
      opt.steps, ",\n  \"kv_cache_dtype\": \"", opt.kv_cache_dtype, "\",\n  \"context\": ", opt.context,
      ",\n  \"loadavg_1m_at_start\": ", load, ",\n  \"simd_target\": \"",
      peaks.simd_target, "\",\n  \"fma_probe_lanes\": ", peaks.lanes,
      ",\n  \"fma_peak_gflops_1_thread\": ", peaks.fma_gflops_1t, ",\n  \"fma_peak_gflops\": ",
      peaks.fma_gflops, ",\n  \"bf16_matmul_kernels\": \"",
      peaks.bf16_dot ? "avx512-bf16 dot products" : "f32 fma", "\",\n  \"bf16_dot_peak_gflops\": ",
      peaks.dot_gflops, ",\n  \"results\": [\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double roof = std::min(r.compute_roof, r.bandwidth_roof);
    absl::StrAppend(&out, "    {\"name\": \"", r.name, "\", \"median_tok_s\": ", Median(r.rates),
                    ", \"median_canary_gb_s\": ", Median(r.canaries),
                    ", \"compute_roof_tok_s\": ", r.compute_roof,
                    ", \"bandwidth_roof_tok_s\": ", r.bandwidth_roof,
                    ", \"fraction_of_roof\": ", Median(r.rates) / roof, ", \"samples_tok_s\": [");
    for (size_t j = 0; j < r.rates.size(); ++j) absl::StrAppend(&out, j ? ", " : "", r.rates[j]);
    absl::StrAppend(&out, "], \"canary_gb_s\": [");
    for (size_t j = 0; j < r.canaries.size(); ++j) absl::StrAppend(&out, j ? ", " : "", r.canaries[j]);
    absl::StrAppend(&out, "]}", i + 1 < results.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&out, "  ]\n}\n");
  return out;
}

int Main(int argc, char** argv) {
  Options opt;
  ArgParser parser("bench_cpu_forward [options]",
                   "CPU backend prefill/decode throughput at llama-3.2-1b and tiny shapes; JSON on stdout.");
  parser.AddInt("threads", &opt.threads, "backend threads");
  parser.AddInt("reps", &opt.reps, "timed repetitions per case (medians reported)");
  parser.AddInt("steps", &opt.steps, "decode steps per repetition");
  parser.AddString("only", &opt.only, "one case: prefill | decode1 | decode4 | decode16 | tiny");
  parser.AddString("simd", &opt.simd, "avx2: run the AVX2 code path on an AVX-512 machine");
  parser.AddString("kv-cache-dtype", &opt.kv_cache_dtype, "f32 | bf16 | fp8_e4m3: the KV cache's element type");
  parser.AddInt("context", &opt.context,
                "> 0: the decode cases start at this context and the prefill case is a 512-token chunk after it "
                "(a late chunk of a long prompt), its KV taken as cached, so long contexts cost seconds, not minutes");
  if (auto code = parser.ParseOrExitCode(argc, argv, "bench_cpu_forward")) return *code;
  double load = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  if (opt.kv_cache_dtype != "f32" && opt.kv_cache_dtype != "bf16" && opt.kv_cache_dtype != "fp8_e4m3") {
    std::fprintf(stderr, "--kv-cache-dtype takes f32, bf16 or fp8_e4m3\n");
    return 2;
  }
  const cpu::KvDtype kv_dtype = opt.kv_cache_dtype == "bf16"       ? cpu::KvDtype::kBf16
                                : opt.kv_cache_dtype == "fp8_e4m3" ? cpu::KvDtype::kFp8E4m3
                                                                   : cpu::KvDtype::kF32;
  if (opt.simd == "avx2") {
    hwy::SetSupportedTargetsForTest(HWY_AVX2 | HWY_EMU128);
  } else if (!opt.simd.empty()) {
    std::fprintf(stderr, "--simd takes avx2\n");
    return 2;
  }
  Peaks peaks;
  peaks.simd_target = cpu::SimdTargetName();
  peaks.lanes = peaks.simd_target.rfind("AVX3", 0) == 0 ? 16 : 8;
  {
    std::vector<double> one, all;
    const PeakKind fma = peaks.lanes == 16 ? PeakKind::kFma512 : PeakKind::kFma256;
    peaks.bf16_dot = cpu::Bf16DotProductKernels();
    std::vector<double> dot;
    for (int i = 0; i < 3; ++i) {
      one.push_back(Peak(1, fma));
      all.push_back(Peak(opt.threads, fma));
      if (peaks.bf16_dot) dot.push_back(Peak(opt.threads, PeakKind::kBf16Dot512));
    }
    peaks.fma_gflops_1t = Median(one);
    peaks.fma_gflops = Median(all);
    peaks.dot_gflops = Median(dot);
  }
  std::fprintf(stderr, "kernels: %s; f32 FMA peak %.0f GFLOP/s (1 thread %.0f); bf16 matmuls: %s",
               peaks.simd_target.c_str(), peaks.fma_gflops, peaks.fma_gflops_1t,
               peaks.bf16_dot ? "vdpbf16ps" : "f32 FMA");
  if (peaks.bf16_dot) std::fprintf(stderr, " (peak %.0f GFLOP/s)", peaks.dot_gflops);
  std::fputc('\n', stderr);
  std::vector<Result> results;
  const int block_size = 16;
  auto want = [&](const std::string& name) { return opt.only.empty() || opt.only == name; };

  struct Case { std::string name; int batch, prompt, steps, start = 0; };
  std::vector<Case> big_cases;
  if (want("prefill")) {
    big_cases.push_back({absl::StrCat("llama-3.2-1b prefill 512",
                                      opt.context > 0 ? absl::StrCat(" at context ", opt.context) : "", " (tok/s)"),
                         1, 512, 0, opt.context});
  }
  for (int b : {1, 4, 16}) {
    if (want(absl::StrCat("decode", b))) {
      big_cases.push_back({absl::StrCat("llama-3.2-1b decode batch ", b,
                                        opt.context > 0 ? absl::StrCat(" at context ", opt.context) : "",
                                        " (aggregate tok/s)"),
                           b, opt.context > 0 ? opt.context : 128, opt.steps});
    }
  }
  auto run_cases = [&](const std::string& preset, const std::vector<Case>& cases) {
    if (cases.empty()) return;
    const double t0 = Now();
    auto model = BuildModel(preset);
    if (!model) std::exit(1);
    auto backend =
        CpuBackend::Create(model->config, model->weights, {.num_threads = opt.threads, .kv_dtype = kv_dtype});
    if (!backend.ok()) {
      std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
      std::exit(1);
    }
    std::fprintf(stderr, "%s: built and packed in %.1f s\n", preset.c_str(), Now() - t0);
    int longest = 0;
    for (const Case& c : cases) longest = std::max(longest, c.start + c.prompt);
    const int blocks_per_seq = (longest + opt.steps + block_size) / block_size + 1;
    int widest = 1;
    for (const Case& c : cases) widest = std::max(widest, c.batch);
    if (!(*backend)->AllocateKvCache(widest * blocks_per_seq, block_size).ok()) std::exit(1);
    ModelCost cost = CostOf(model->config);
    cost.kv_bytes_per_pos *= static_cast<double>(cpu::KvElementBytes(kv_dtype)) / sizeof(float);
    for (const Case& c : cases) {
      Result r{c.name, {}, {}};
      // Prefill: every prompt token through the layers, one lm_head row per
      // sequence. Decode: each step streams the weights once for the batch.
      const double ctx = c.steps == 0 ? c.start + c.prompt / 2.0 : c.prompt + c.steps / 2.0;
      const double tokens = c.steps == 0 ? c.prompt : 1;
      const double flops_per_token = cost.matmul_flops + cost.lm_head_flops / tokens +
                                     cost.attn_flops_per_ctx * ctx;
      r.compute_roof = peaks.matmul_gflops() * 1e9 / flops_per_token;
      const double bytes_per_step = cost.weight_bytes + c.batch * ctx * cost.kv_bytes_per_pos;
      const bool synthetic = opt.context > 0 && c.steps > 0;
      RunOnce(**backend, c.batch, c.prompt, std::min(c.steps, 8), block_size, blocks_per_seq, synthetic,
              c.start);  // warm-up
      for (int rep = 0; rep < opt.reps; ++rep) {
        r.canaries.push_back(BandwidthCanary(opt.threads));
        auto [prefill, decode] =
            RunOnce(**backend, c.batch, c.prompt, c.steps, block_size, blocks_per_seq, synthetic, c.start);
        r.rates.push_back(c.steps == 0 ? prefill : decode);
        std::fprintf(stderr, "  %s: %.2f tok/s (canary %.1f GB/s)\n", c.name.c_str(), r.rates.back(),
                     r.canaries.back());
      }
      r.bandwidth_roof = Median(r.canaries) * 1e9 * c.batch * tokens / bytes_per_step;
      results.push_back(r);
    }
  };
  run_cases("llama-3.2-1b", big_cases);
  if (want("tiny")) run_cases("tiny", {{"tiny decode batch 1 (tok/s)", 1, 128, opt.steps}});
  std::fputs(Json(results, opt, load, peaks).c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
