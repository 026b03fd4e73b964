// 8-bit weights against bf16 on the CPU backend, in llama-3.2-1b's shapes:
// prefill tokens/s (one 512-token prompt) and decode tokens/s at batch 1
// (128-token prompt, then --steps steps), for bf16, int8 and fp8 (e4m3)
// weights. The 8-bit models are the bf16 dummy model's Linear weights
// quantized per channel as `floe make-model --quantize` does: "int8" and
// "fp8" leave lm_head (tied to the embeddings) in bf16, as quantizers do;
// "int8+lm_head" and "fp8+lm_head" quantize it too, as llama.cpp's Q8_0 does
// (the embedding rows are still read from the bf16 table). The backends are
// measured in turns within each repetition (bf16, int8, ..., bf16, ...) so
// that the machine's noise falls on all of them; medians and the ratios of
// medians to bf16 go to stdout as JSON, with the median of each repetition's
// own ratio (the "paired" figures: this host's memory bandwidth drifts by
// tens of percent between repetitions, and a ratio within one is steadier).
//
// Usage: bench_quantized [--threads N] [--reps N] [--steps N]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"
#include "kernels/cpu/matmul.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/quantize.h"
#include "bench/engine/bench_timing.h"
#include "bench/engine/dummy_model.h"

namespace floe {
namespace {

struct Variant {
  std::string name;
  DType dtype;
  bool lm_head = false;
  std::unique_ptr<CpuBackend> backend;
  size_t weight_bytes = 0;
  std::vector<double> prefill, decode;
};

double Seconds(Backend& backend, std::span<const ForwardSequence> batch, std::vector<float>& logits) {
  const double t0 = Now();
  const absl::Status s = backend.Forward(batch, logits.data());
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
  return Now() - t0;
}

// {prefill tok/s of a 512-token prompt, decode tok/s at batch 1}.
std::pair<double, double> Run(Backend& backend, int steps) {
  const int vocab = backend.config().vocab_size;
  std::vector<float> logits(vocab);
  std::vector<int32_t> table(64);
  for (int i = 0; i < 64; ++i) table[i] = i;
  std::vector<int32_t> prompt(512);
  for (int i = 0; i < 512; ++i) prompt[i] = (i * 131 + 7) % vocab;
  ForwardSequence seq{prompt, 0, {table.data(), 32}, 1};
  const double prefill = 512 / Seconds(backend, {&seq, 1}, logits);
  seq = {{prompt.data(), 128}, 0, {table.data(), 8}, 1};
  Seconds(backend, {&seq, 1}, logits);
  double decode_s = 0;
  for (int step = 0; step < steps; ++step) {
    int32_t next = (step * 131 + 11) % vocab;
    seq = {{&next, 1}, 128 + step, {table.data(), static_cast<size_t>((128 + step) / 16 + 1)}, 1};
    decode_s += Seconds(backend, {&seq, 1}, logits);
  }
  return {prefill, steps / decode_s};
}

int Main(int argc, char** argv) {
  int threads = 2, reps = 5, steps = 64;
  ArgParser parser("bench_quantized [options]",
                   "bf16 vs int8 vs fp8 weights at llama-3.2-1b shapes: prefill 512 and decode batch 1; JSON on stdout.");
  parser.AddInt("threads", &threads, "backend threads");
  parser.AddInt("reps", &reps, "timed repetitions (medians reported)");
  parser.AddInt("steps", &steps, "decode steps per repetition");
  if (auto code = parser.ParseOrExitCode(argc, argv, "bench_quantized")) return *code;
  if (steps < 1 || steps > 384 || reps < 1) {
    std::fprintf(stderr, "--steps must be in [1, 384] and --reps positive\n");
    return 2;
  }
  const double t0 = Now();
  auto model = BuildModel("llama-3.2-1b");
  if (!model) return 1;
  std::vector<Variant> variants;
  variants.push_back({"bf16", DType::kBF16});
  variants.push_back({"int8", DType::kI8});
  variants.push_back({"fp8", DType::kF8E4M3});
  variants.push_back({"int8+lm_head", DType::kI8, true});
  variants.push_back({"fp8+lm_head", DType::kF8E4M3, true});
  for (Variant& v : variants) {
    ModelWeights weights = model->weights;
    std::vector<QuantizedMatrix> owned;
    if (IsQuantized(v.dtype)) {
      owned.reserve(weights.layers.size() * 7 + 1);
      if (v.lm_head) {
        owned.push_back(QuantizePerChannel(weights.lm_head, v.dtype).value());
        weights.lm_head = owned.back().View();
      }
      for (LayerWeights& l : weights.layers) {
        for (TensorView* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
          owned.push_back(QuantizePerChannel(*t, v.dtype).value());
          *t = owned.back().View();
        }
      }
    }
    auto backend = CpuBackend::Create(model->config, weights, {.num_threads = threads});
    if (!backend.ok() || !(*backend)->AllocateKvCache(64, 16).ok()) {
      std::fprintf(stderr, "%s: %s\n", v.name.c_str(), backend.status().ToString().c_str());
      return 1;
    }
    v.backend = std::move(backend).value();
    v.weight_bytes = v.backend->WeightBytes();
    std::fprintf(stderr, "%s: packed, %.2f GB of weights (%.0f s since start)\n", v.name.c_str(),
                 v.weight_bytes / 1e9, Now() - t0);
    Run(*v.backend, 4);  // warm-up
  }
  for (int rep = 0; rep < reps; ++rep) {
    for (Variant& v : variants) {
      auto [prefill, decode] = Run(*v.backend, steps);
      v.prefill.push_back(prefill);
      v.decode.push_back(decode);
      std::fprintf(stderr, "  rep %d %s: prefill %.1f tok/s, decode %.2f tok/s\n", rep + 1, v.name.c_str(), prefill,
                   decode);
    }
  }
  const double base_prefill = Median(variants[0].prefill), base_decode = Median(variants[0].decode);
  auto paired = [&](const std::vector<double>& v, const std::vector<double>& base) {
    std::vector<double> ratios;
    for (size_t i = 0; i < v.size(); ++i) ratios.push_back(v[i] / base[i]);
    return Median(ratios);
  };
  std::string out = absl::StrCat("{\n  \"model\": \"llama-3.2-1b (dummy weights)\",\n  \"threads\": ", threads,
                                 ",\n  \"reps\": ", reps, ",\n  \"decode_steps\": ", steps,
                                 ",\n  \"dot_product_kernels\": ", cpu::Bf16DotProductKernels() ? "true" : "false",
                                 ",\n  \"results\": [\n");
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    absl::StrAppend(&out, "    {\"weights\": \"", v.name, "\", \"weight_bytes\": ", v.weight_bytes,
                    ", \"prefill_512_tok_s\": ", Median(v.prefill), ", \"decode_b1_tok_s\": ", Median(v.decode),
                    ", \"prefill_vs_bf16\": ", Median(v.prefill) / base_prefill,
                    ", \"decode_vs_bf16\": ", Median(v.decode) / base_decode,
                    ", \"prefill_vs_bf16_paired\": ", paired(v.prefill, variants[0].prefill),
                    ", \"decode_vs_bf16_paired\": ", paired(v.decode, variants[0].decode), "}",
                    i + 1 < variants.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&out, "  ]\n}\n");
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
