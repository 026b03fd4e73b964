// CUDA backend throughput on dummy (seeded random bf16) weights in a real
// model's shapes (llama-3.1-8b by default): prefill tokens/s of one
// 2,048-token prompt and aggregate decode tokens/s at batch 1, 8 and 64
// (128-token prompts, then --steps decode steps), medians over --reps after a
// warm-up. --context N starts every case after N cached tokens instead (the
// prefill a 2,048-token chunk after them, decoding at N; the context is
// synthetic: attention reads every cached position whatever it holds), and
// --kv-cache-dtypes runs the cases once per KV cache dtype (a backend each,
// one after the other, on the same weights). The roofs are measured in the
// same run on the same GPU: the device-to-device copy bandwidth (read +
// write bytes of a 2 GiB copy) and cuBLAS's bf16 GEMM rate (8192^3, f32
// accumulation); each case states its roof (the weights and KV read per
// decode step at that bandwidth; the prefill's FLOPs at that GEMM rate) and
// the fraction reached.
// JSON on stdout, a table on stderr. Needs a GPU (exit 2 without one).
//
// Usage: bench_cuda_forward [--preset NAME] [--reps N] [--steps N] [--only NAME]
//                           [--context N] [--kv-cache-dtypes f32,bf16,fp8_e4m3]
//   NAME: prefill | decode1 | decode8 | decode64
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/engine/bench_timing.h"
#include "bench/engine/dummy_model.h"
#include "bench/engine/forward_bench.h"
#include "common/cli/arg_parser.h"
#include "kernels/cuda/model_kernels.h"
#include "services/worker/backend/cuda_backend.h"

namespace floe {
namespace {

struct Options {
  std::string preset = "llama-3.1-8b";
  int reps = 5;
  int steps = 32;
  std::string only;
  bool enforce_eager = false;
  int context = 0;
  std::string kv_cache_dtypes = "f32";
};

bool ParseKvDtype(const std::string& name, cuda::KvDtype* out) {
  if (name == "f32") *out = cuda::KvDtype::kF32;
  else if (name == "bf16") *out = cuda::KvDtype::kBf16;
  else if (name == "fp8_e4m3" || name == "fp8") *out = cuda::KvDtype::kFp8E4m3;
  else return false;
  return true;
}

// GB/s of a device-to-device copy, read + write bytes (median of 5).
double CopyBandwidth() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> rates;
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    rates.push_back(2.0 * bytes / (ms * 1e-3) / 1e9);
  }
  cudaFree(a);
  cudaFree(b);
  return Median(rates);
}

// TFLOP/s of cuBLAS's bf16 GEMM (f32 accumulation) at n^3 (median of 5).
double GemmRate(int n = 8192) {
  const size_t elems = static_cast<size_t>(n) * n;
  __nv_bfloat16 *a = nullptr, *b = nullptr;
  float* c = nullptr;
  if (cudaMalloc(&a, elems * 2) != cudaSuccess || cudaMalloc(&b, elems * 2) != cudaSuccess ||
      cudaMalloc(&c, elems * 4) != cudaSuccess) {
    return 0;
  }
  // Non-zero operands (0x3c3c: bf16 0.0115): zeros draw less power and
  // would read a higher rate than real weights get.
  cudaMemset(a, 0x3c, elems * 2);
  cudaMemset(b, 0x3c, elems * 2);
  cublasHandle_t handle;
  cublasCreate(&handle);
  const float alpha = 1, beta = 0;
  auto run = [&] {
    return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                        &beta, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  if (run() != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasGemmEx failed: no GEMM roof\n");
    return 0;
  }
  cudaDeviceSynchronize();
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) {
    const double t0 = Now();
    run();
    cudaDeviceSynchronize();
    rates.push_back(2.0 * n * n * static_cast<double>(n) / (Now() - t0) / 1e12);
  }
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return Median(rates);
}

int Main(int argc, char** argv) {
  Options opt;
  ArgParser parser("bench_cuda_forward [options]",
                   "CUDA backend prefill/decode throughput against the GPU's measured copy bandwidth and GEMM "
                   "rate; JSON on stdout. Needs a GPU.");
  parser.AddString("preset", &opt.preset, "model shapes (floe make-model presets), dummy bf16 weights");
  parser.AddInt("reps", &opt.reps, "timed repetitions per case (medians reported)");
  parser.AddInt("steps", &opt.steps, "decode steps per repetition");
  parser.AddString("only", &opt.only, "cases, comma-separated: prefill, decode1, decode8, decode64 (empty: all)");
  parser.AddBool("enforce-eager", &opt.enforce_eager, "decode steps without CUDA graphs (the eager baseline)");
  parser.AddInt("context", &opt.context, "cached tokens before every case (synthetic; 0: 128-token prompts)");
  parser.AddString("kv-cache-dtypes", &opt.kv_cache_dtypes, "KV cache dtypes, comma-separated: f32, bf16, fp8_e4m3");
  if (auto code = parser.ParseOrExitCode(argc, argv, "bench_cuda_forward")) return *code;
  std::vector<std::string> dtype_names = absl::StrSplit(opt.kv_cache_dtypes, ',', absl::SkipEmpty());
  std::vector<cuda::KvDtype> dtypes(dtype_names.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (!ParseKvDtype(dtype_names[i], &dtypes[i])) {
      std::fprintf(stderr, "--kv-cache-dtypes: unknown dtype \"%s\" (f32, bf16, fp8_e4m3)\n", dtype_names[i].c_str());
      return 1;
    }
  }
  if (dtypes.empty() || opt.context < 0) {
    std::fprintf(stderr, "--kv-cache-dtypes needs a dtype; --context must be >= 0\n");
    return 1;
  }
  if (cuda::DeviceCount() == 0) {
    std::fprintf(stderr, "bench_cuda_forward: no CUDA device is visible\n");
    return 2;
  }
  const double copy_gb_s = CopyBandwidth();
  const double gemm_tflops = GemmRate();
  std::fprintf(stderr, "roofs: copy %.0f GB/s (read + write), bf16 GEMM %.0f TFLOP/s\n", copy_gb_s, gemm_tflops);
  const double built = Now();
  auto model = BuildModel(opt.preset);
  if (!model) return 2;
  std::fprintf(stderr, "%s dummy weights built in %.1f s\n", opt.preset.c_str(), Now() - built);
  const ModelCost cost = CostOf(model->config);  // kv_bytes_per_pos: an f32 cache's
  struct Case {
    std::string key, name;
    int batch, prompt, steps;
  };
  const int prefill_tokens = 2048;
  std::vector<Case> cases = {{"prefill", "prefill 2048 (tok/s)", 1, prefill_tokens, 0}};
  for (int b : {1, 8, 64}) {
    cases.push_back({absl::StrCat("decode", b), absl::StrCat("decode batch ", b, " (aggregate tok/s)"), b,
                     opt.context > 0 ? opt.context : 128, opt.steps});
  }
  const std::vector<std::string> only = absl::StrSplit(opt.only, ',', absl::SkipEmpty());
  auto selected = [&](const Case& c) { return only.empty() || std::find(only.begin(), only.end(), c.key) != only.end(); };
  const int block_size = 16;
  int max_batch = 1;
  for (const Case& c : cases) {
    if (selected(c)) max_batch = std::max(max_batch, c.batch);
  }
  const int blocks_per_seq = (opt.context + prefill_tokens + opt.steps + block_size) / block_size + 1;
  std::string json = absl::StrCat("{\n  \"preset\": \"", opt.preset, "\",\n  \"cuda_graphs\": ",
                                  opt.enforce_eager ? "false" : "true", ",\n  \"copy_gb_s\": ", copy_gb_s,
                                  ",\n  \"bf16_gemm_tflops\": ", gemm_tflops, ",\n  \"reps\": ", opt.reps,
                                  ",\n  \"decode_steps\": ", opt.steps, ",\n  \"context\": ", opt.context,
                                  ",\n  \"results\": [\n");
  bool first = true;
  std::fprintf(stderr, "%-46s %12s %12s %9s\n", "case", "tok/s", "roof tok/s", "fraction");
  for (size_t di = 0; di < dtypes.size(); ++di) {
    CudaBackendOptions backend_options;
    backend_options.cuda_graphs = !opt.enforce_eager;
    backend_options.kv_dtype = dtypes[di];
    const double t0 = Now();
    auto backend = CudaBackend::Create(model->config, model->weights, backend_options);
    if (!backend.ok()) {
      std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "%s on %s, %s KV cache: uploaded in %.1f s, %.2f GiB of weights\n", opt.preset.c_str(),
                 (*backend)->device_name().c_str(), dtype_names[di].c_str(), Now() - t0,
                 (*backend)->WeightBytes() / double(1 << 30));
    if (absl::Status s = (*backend)->ReserveActivations(prefill_tokens, max_batch); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    if (absl::Status s = (*backend)->AllocateKvCache(max_batch * blocks_per_seq, block_size); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    const double kv_bytes_per_pos = cost.kv_bytes_per_pos * cuda::KvElementBytes(dtypes[di]) / 4.0;
    for (const Case& c : cases) {
      if (!selected(c)) continue;
      const bool prefill = c.steps == 0;
      const double ctx = prefill ? opt.context + c.prompt / 2.0 : c.prompt + c.steps / 2.0;
      double roof = 0;
      std::string roof_kind;
      if (prefill) {  // compute-bound: FLOPs at the GEMM rate
        const double flops = c.prompt * (cost.matmul_flops + cost.attn_flops_per_ctx * ctx) + cost.lm_head_flops;
        roof = gemm_tflops * 1e12 / (flops / c.prompt);
        roof_kind = "bf16 GEMM rate";
      } else {  // bandwidth-bound: the weights and the batch's KV per step
        const double bytes = cost.weight_bytes + c.batch * ctx * kv_bytes_per_pos;
        roof = copy_gb_s * 1e9 / bytes * c.batch;
        roof_kind = "copy bandwidth";
      }
      // The decode cases' context is synthetic when --context is given; the
      // prefill case is then a chunk after it.
      const bool synthetic = !prefill && opt.context > 0;
      const int start = prefill ? opt.context : 0;
      RunOnce(**backend, c.batch, c.prompt, std::min(c.steps, 4), block_size, blocks_per_seq, synthetic,
              start);  // warm-up
      std::vector<double> rates;
      for (int rep = 0; rep < opt.reps; ++rep) {
        auto [p, d] = RunOnce(**backend, c.batch, c.prompt, c.steps, block_size, blocks_per_seq, synthetic, start);
        rates.push_back(prefill ? p : d);
      }
      const double median = Median(rates);
      const std::string name = absl::StrCat(c.name, " [", dtype_names[di], " KV]");
      std::fprintf(stderr, "%-46s %12.1f %12.1f %8.1f%%\n", name.c_str(), median, roof, 100 * median / roof);
      absl::StrAppend(&json, first ? "" : ",\n", "    {\"name\": \"", name, "\", \"case\": \"", c.key,
                      "\", \"kv_cache_dtype\": \"", dtype_names[di], "\", \"device\": \"",
                      (*backend)->device_name(), "\", \"median_tok_s\": ", median, ", \"roof_tok_s\": ", roof,
                      ", \"roof\": \"", roof_kind, "\", \"fraction_of_roof\": ", median / roof,
                      ", \"samples_tok_s\": [");
      for (size_t i = 0; i < rates.size(); ++i) absl::StrAppend(&json, i ? ", " : "", rates[i]);
      absl::StrAppend(&json, "]}");
      first = false;
    }
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  std::fputs(json.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
