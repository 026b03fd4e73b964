// SwiftKV's prefill speed-up on the CPU backend: one prompt of --prompt
// tokens (default 2048) at Llama-3.2-1B shapes (dummy bf16 weights, 16 layers),
// prefilled by the same weights served two ways in one process: SwiftKV on
// (every token runs layers [0, 8), the KV of layers [8, 16) from one
// projection, only the last token runs them) and dense (swiftkv off: every
// token runs every layer). Repetitions alternate between the two, after a
// warm-up of each; medians and their ratio. The ideal ratio is the matmul
// and attention FLOPs' (what a token costs dense over what it costs under
// SwiftKV); the JSON states it and the fraction of it reached.
// JSON on stdout.
//
// Usage: bench_swiftkv_prefill [--threads N] [--reps N] [--prompt N] [--preset P]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/engine/bench_timing.h"
#include "bench/engine/dummy_model.h"
#include "common/cli/arg_parser.h"
#include "services/worker/backend/cpu_backend.h"

namespace floe {
namespace {

// Tokens/s of one prefill of `prompt` (one Forward, last row's logits).
double Prefill(Backend& backend, const std::vector<int32_t>& prompt, const std::vector<int32_t>& table) {
  std::vector<float> logits(backend.config().vocab_size);
  ForwardSequence seq{prompt, 0, table, 1};
  const double t0 = Now();
  const absl::Status s = backend.Forward({&seq, 1}, logits.data());
  const double dt = Now() - t0;
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
  return prompt.size() / dt;
}

// Matmul + attention FLOPs per prompt token (causal: a token attends to
// half the prompt on average) under `config`, plus the last token's lm_head.
double FlopsPerToken(const ModelConfig& c, int prompt) {
  const double h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const double layer = 2 * (h * (q + 2 * kv) + q * h + 3 * h * c.intermediate_size) + 4 * q * prompt / 2.0;
  const int dense = c.dense_layers(), tail = c.num_layers - dense;
  return dense * layer + tail * 2 * h * 2 * kv + (tail * layer + 2 * h * c.vocab_size) / prompt;
}

int Main(int argc, char** argv) {
  int threads = 2, reps = 3, prompt_len = 2048;
  std::string preset = "llama-3.2-1b-swiftkv";
  ArgParser parser("bench_swiftkv_prefill [options]",
                   "SwiftKV vs dense prefill tokens/s on the same weights; JSON on stdout.");
  parser.AddInt("threads", &threads, "backend threads");
  parser.AddInt("reps", &reps, "timed repetitions of each (alternating; medians reported)");
  parser.AddInt("prompt", &prompt_len, "prompt tokens");
  parser.AddString("preset", &preset, "a -swiftkv checkpoint preset (llama-3.2-1b-swiftkv, tiny-swiftkv)");
  if (auto code = parser.ParseOrExitCode(argc, argv, "bench_swiftkv_prefill")) return *code;
  double load = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  auto model = BuildModel(preset);
  if (!model) return 1;
  if (!model->config.swiftkv) {
    std::fprintf(stderr, "--preset %s is not a SwiftKV preset\n", preset.c_str());
    return 2;
  }
  ModelConfig dense_config = model->config;
  dense_config.swiftkv = false;
  const int block_size = 16, blocks = (prompt_len + block_size - 1) / block_size;
  std::vector<int32_t> table(blocks), prompt(prompt_len);
  for (int i = 0; i < blocks; ++i) table[i] = i;
  for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 131 + 7) % model->config.vocab_size;
  struct Side {
    const char* name;
    std::unique_ptr<CpuBackend> backend;
    std::vector<double> rates;
    double flops_per_token = 0;
  };
  Side sides[2] = {{"dense"}, {"swiftkv"}};
  for (Side& side : sides) {
    const ModelConfig& config = side.name == std::string("dense") ? dense_config : model->config;
    auto backend = CpuBackend::Create(config, model->weights, {.num_threads = threads});
    if (!backend.ok() || !(*backend)->AllocateKvCache(blocks, block_size).ok()) {
      std::fprintf(stderr, "cannot build the %s backend\n", side.name);
      return 1;
    }
    side.backend = *std::move(backend);
    side.flops_per_token = FlopsPerToken(config, prompt_len);
    const double warm = Prefill(*side.backend, prompt, table);
    std::fprintf(stderr, "%s: warm-up %.1f tok/s\n", side.name, warm);
  }
  for (int rep = 0; rep < reps; ++rep) {
    for (Side& side : sides) {
      side.rates.push_back(Prefill(*side.backend, prompt, table));
      std::fprintf(stderr, "  rep %d %s: %.1f tok/s\n", rep, side.name, side.rates.back());
    }
  }
  const double dense = Median(sides[0].rates), swiftkv = Median(sides[1].rates);
  const double ideal = sides[0].flops_per_token / sides[1].flops_per_token;
  std::string out = absl::StrCat("{\n  \"preset\": \"", preset, "\",\n  \"layers\": ", model->config.num_layers,
                                 ",\n  \"num_key_value_layers\": ", model->config.num_key_value_layers,
                                 ",\n  \"prompt_tokens\": ", prompt_len, ",\n  \"threads\": ", threads,
                                 ",\n  \"reps\": ", reps, ",\n  \"loadavg_1m_at_start\": ", load, ",\n");
  for (const Side& side : sides) {
    absl::StrAppend(&out, "  \"", side.name, "_median_tok_s\": ", Median(side.rates), ",\n  \"", side.name,
                    "_samples_tok_s\": [");
    for (size_t i = 0; i < side.rates.size(); ++i) absl::StrAppend(&out, i ? ", " : "", side.rates[i]);
    absl::StrAppend(&out, "],\n");
  }
  absl::StrAppend(&out, "  \"speedup\": ", swiftkv / dense, ",\n  \"ideal_speedup_flops\": ", ideal,
                  ",\n  \"fraction_of_ideal\": ", swiftkv / dense / ideal, ",\n  \"fraction_of_2x\": ",
                  swiftkv / dense / 2.0, "\n}\n");
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
