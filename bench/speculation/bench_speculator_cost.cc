// What a model-based speculator costs per step, against the target's own
// decode step, in the same run: an Arctic sum_lstm speculator (n_predict 3,
// dims = the model's hidden size, as Arctic's Llama-3.1-8B recipe's 4096 is
// that model's) drafting for a batch of sequences, and the target (dummy bf16
// weights) decoding one token for each of them with a context of --context
// tokens. Batches 1, 16 and 64 by default; repetitions alternate the two and
// report medians. JSON on stdout, progress on stderr.
#include <cstdio>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/engine/bench_timing.h"
#include "bench/engine/dummy_model.h"
#include "common/cli/arg_parser.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/speculation/lstm_speculator.h"
#include "services/worker/speculation/speculator_writer.h"

namespace floe {
namespace {

int Main(int argc, char** argv) {
  std::string preset = "llama-3.2-1b", batches_flag = "1,16,64", dir;
  int reps = 5, context = 256, threads = 0;
  ArgParser parser("bench_speculator_cost [--preset llama-3.2-1b] [--batches 1,16,64]",
                   "Speculator (sum_lstm, n_predict 3) step time against the target's decode step; JSON on stdout.");
  parser.AddString("preset", &preset, "target shapes (a make-model preset)");
  parser.AddString("batches", &batches_flag, "comma-separated batch sizes");
  parser.AddInt("reps", &reps, "timed repetitions per batch (after one warm-up)");
  parser.AddInt("context", &context, "tokens each sequence holds before the timed decode step");
  parser.AddInt("threads", &threads, "compute threads (0: all cores)");
  parser.AddString("dir", &dir, "where to write the speculator (default: a temporary folder)");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "bench_speculator_cost")) return *exit_code;
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int> batches;
  for (absl::string_view b : absl::StrSplit(batches_flag, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(b, &v) || v < 1 || v > 256) return std::fprintf(stderr, "--batches: bad %s\n", std::string(b).c_str()), 2;
    batches.push_back(v);
  }
  auto model = BuildModel(preset);
  if (!model) return 2;
  const ModelConfig& config = model->config;
  if (dir.empty()) dir = (std::filesystem::temp_directory_path() / absl::StrCat("floe_speculator_", getpid())).string();
  SpeculatorSpec spec;
  spec.hidden_size = config.hidden_size;
  spec.vocab_size = config.vocab_size;
  spec.dtype = DType::kBF16;
  spec.seed = 1;
  std::fprintf(stderr, "writing a %lld-dim sum_lstm speculator to %s ...\n", static_cast<long long>(config.hidden_size),
               dir.c_str());
  if (absl::Status s = WriteRandomSpeculator(spec, dir); !s.ok())
    return std::fprintf(stderr, "%s\n", std::string(s.message()).c_str()), 1;
  auto speculator = LstmSpeculator::Load(dir, threads);
  if (!speculator.ok()) return std::fprintf(stderr, "%s\n", std::string(speculator.status().message()).c_str()), 1;
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int block_size = 16, blocks_per_seq = (context + 1 + block_size - 1) / block_size;
  auto backend = CpuBackend::Create(config, model->weights, {.num_threads = threads});
  if (!backend.ok()) return std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str()), 1;
  if (absl::Status s = (*backend)->AllocateKvCache(max_batch * blocks_per_seq, block_size); !s.ok())
    return std::fprintf(stderr, "%s\n", std::string(s.message()).c_str()), 1;

  // Every sequence's KV holds `context` tokens (prefilled once).
  const int vocab = config.vocab_size;
  std::vector<std::vector<int32_t>> tables(max_batch), prompts(max_batch);
  for (int s = 0; s < max_batch; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    for (int i = 0; i < context; ++i) prompts[s].push_back((s * 7919 + i * 131) % vocab);
  }
  std::vector<float> logits(static_cast<size_t>(max_batch) * vocab);
  for (int s = 0; s < max_batch; ++s) {
    ForwardSequence f{prompts[s], 0, tables[s], 1};
    if (absl::Status st = (*backend)->Forward({&f, 1}, logits.data()); !st.ok())
      return std::fprintf(stderr, "%s\n", std::string(st.message()).c_str()), 1;
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> hidden(static_cast<size_t>(max_batch) * config.hidden_size);
  for (float& h : hidden) h = normal(rng);
  nlohmann::json rows = nlohmann::json::array();
  for (int batch : batches) {
    std::vector<int32_t> next(batch), drafts(batch * 3);
    std::vector<ForwardSequence> fwd(batch);
    std::vector<double> target_ms, speculator_ms;
    for (int rep = 0; rep <= reps; ++rep) {
      // The decode step rewrites slot `context` each time: same work per rep.
      for (int s = 0; s < batch; ++s) {
        next[s] = (s * 31 + rep) % vocab;
        fwd[s] = {{&next[s], 1}, context, tables[s], 1};
      }
      double t0 = Now();
      if (absl::Status st = (*backend)->Forward(fwd, logits.data()); !st.ok())
        return std::fprintf(stderr, "%s\n", std::string(st.message()).c_str()), 1;
      const double target = (Now() - t0) * 1e3;
      t0 = Now();
      (*speculator)->Draft(std::span<const float>(hidden).first(static_cast<size_t>(batch) * config.hidden_size),
                           next, 3, drafts);
      const double draft = (Now() - t0) * 1e3;
      if (rep == 0) continue;  // warm-up
      target_ms.push_back(target);
      speculator_ms.push_back(draft);
    }
    const double t = Median(target_ms), d = Median(speculator_ms);
    std::fprintf(stderr, "batch %d: target decode step %.2f ms, speculator (3 tokens) %.2f ms, ratio %.3f\n", batch, t,
                 d, d / t);
    rows.push_back({{"batch", batch},
                    {"target_decode_step_ms", t},
                    {"speculator_step_ms", d},
                    {"speculator_over_target", d / t},
                    {"target_ms", target_ms},
                    {"speculator_ms", speculator_ms}});
  }
  std::filesystem::remove_all(dir);
  nlohmann::json out = {{"preset", preset},
                        {"speculator", {{"method", "sum_lstm"}, {"n_predict", 3}, {"dim", config.hidden_size},
                                        {"dtype", "bf16"}, {"weight_bytes", (*speculator)->WeightBytes()}}},
                        {"context", context},
                        {"threads", threads},
                        {"simd", cpu::SimdTargetName()},
                        {"bf16_dot_product_kernels", cpu::Bf16DotProductKernels()},
                        {"reps", reps},
                        {"rows", rows}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
