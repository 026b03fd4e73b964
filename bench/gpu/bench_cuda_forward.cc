// CUDA backend throughput on dummy (seeded random bf16) weights in a real
// model's shapes (llama-3.1-8b by default): prefill tokens/s of one
// 2,048-token prompt and aggregate decode tokens/s at batch 1, 8 and 64
// (128-token prompts, then --steps decode steps), medians over --reps after a
// warm-up. The roofs are measured in the same run on the same GPU: the
// device-to-device copy bandwidth (read + write bytes of a 2 GiB copy) and
// cuBLAS's bf16 GEMM rate (8192^3, f32 accumulation); each case states its
// roof (the weights and KV read per decode step at that bandwidth; the
// prefill's FLOPs at that GEMM rate) and the fraction reached.
// JSON on stdout, a table on stderr. Needs a GPU (exit 2 without one).
//
// Usage: bench_cuda_forward [--preset NAME] [--reps N] [--steps N] [--only NAME]
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
};

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
  if (auto code = parser.ParseOrExitCode(argc, argv, "bench_cuda_forward")) return *code;
  if (cuda::DeviceCount() == 0) {
    std::fprintf(stderr, "bench_cuda_forward: no CUDA device is visible\n");
    return 2;
  }
  const double copy_gb_s = CopyBandwidth();
  const double gemm_tflops = GemmRate();
  std::fprintf(stderr, "roofs: copy %.0f GB/s (read + write), bf16 GEMM %.0f TFLOP/s\n", copy_gb_s, gemm_tflops);
  const double t0 = Now();
  auto model = BuildModel(opt.preset);
  if (!model) return 2;
  CudaBackendOptions backend_options;
  backend_options.cuda_graphs = !opt.enforce_eager;
  auto backend = CudaBackend::Create(model->config, model->weights, backend_options);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "%s on %s: built and uploaded in %.1f s, %.2f GiB of weights\n", opt.preset.c_str(),
               (*backend)->device_name().c_str(), Now() - t0, (*backend)->WeightBytes() / double(1 << 30));
  const int block_size = 16, max_batch = 64;
  const int blocks_per_seq = (2048 + opt.steps + block_size) / block_size + 1;
  if (absl::Status s = (*backend)->ReserveActivations(2048, max_batch); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  if (absl::Status s = (*backend)->AllocateKvCache(max_batch * blocks_per_seq, block_size); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const ModelCost cost = CostOf(model->config);
  struct Case {
    std::string key, name;
    int batch, prompt, steps;
  };
  std::vector<Case> cases = {{"prefill", "prefill 2048 (tok/s)", 1, 2048, 0}};
  for (int b : {1, 8, 64}) {
    cases.push_back({absl::StrCat("decode", b), absl::StrCat("decode batch ", b, " (aggregate tok/s)"), b, 128,
                     opt.steps});
  }
  std::string json = absl::StrCat("{\n  \"preset\": \"", opt.preset, "\",\n  \"device\": \"",
                                  (*backend)->device_name(), "\",\n  \"cuda_graphs\": ",
                                  opt.enforce_eager ? "false" : "true", ",\n  \"copy_gb_s\": ", copy_gb_s,
                                  ",\n  \"bf16_gemm_tflops\": ", gemm_tflops, ",\n  \"reps\": ", opt.reps,
                                  ",\n  \"decode_steps\": ", opt.steps, ",\n  \"results\": [\n");
  bool first = true;
  const std::vector<std::string> only = absl::StrSplit(opt.only, ',', absl::SkipEmpty());
  std::fprintf(stderr, "%-34s %12s %12s %9s\n", "case", "tok/s", "roof tok/s", "fraction");
  for (const Case& c : cases) {
    if (!only.empty() && std::find(only.begin(), only.end(), c.key) == only.end()) continue;
    const bool prefill = c.steps == 0;
    const double ctx = prefill ? c.prompt / 2.0 : c.prompt + c.steps / 2.0;
    double roof = 0;
    std::string roof_kind;
    if (prefill) {  // compute-bound: FLOPs at the GEMM rate
      const double flops = c.prompt * (cost.matmul_flops + cost.attn_flops_per_ctx * ctx) + cost.lm_head_flops;
      roof = gemm_tflops * 1e12 / (flops / c.prompt);
      roof_kind = "bf16 GEMM rate";
    } else {  // bandwidth-bound: the weights and the batch's KV per step
      const double bytes = cost.weight_bytes + c.batch * ctx * cost.kv_bytes_per_pos;
      roof = copy_gb_s * 1e9 / bytes * c.batch;
      roof_kind = "copy bandwidth";
    }
    RunOnce(**backend, c.batch, c.prompt, std::min(c.steps, 4), block_size, blocks_per_seq);  // warm-up
    std::vector<double> rates;
    for (int rep = 0; rep < opt.reps; ++rep) {
      auto [p, d] = RunOnce(**backend, c.batch, c.prompt, c.steps, block_size, blocks_per_seq);
      rates.push_back(prefill ? p : d);
    }
    const double median = Median(rates);
    std::fprintf(stderr, "%-34s %12.1f %12.1f %8.1f%%\n", c.name.c_str(), median, roof, 100 * median / roof);
    absl::StrAppend(&json, first ? "" : ",\n", "    {\"name\": \"", c.name, "\", \"median_tok_s\": ", median,
                    ", \"roof_tok_s\": ", roof, ", \"roof\": \"", roof_kind, "\", \"fraction_of_roof\": ",
                    median / roof, ", \"samples_tok_s\": [");
    for (size_t i = 0; i < rates.size(); ++i) absl::StrAppend(&json, i ? ", " : "", rates[i]);
    absl::StrAppend(&json, "]}");
    first = false;
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  std::fputs(json.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
