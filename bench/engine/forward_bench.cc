#include "bench/engine/forward_bench.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/engine/bench_timing.h"

namespace floe {

ModelCost CostOf(const ModelConfig& c) {
  const double h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const double layer = h * (q + 2 * kv) + q * h + 3 * h * c.intermediate_size;
  ModelCost cost;
  cost.lm_head_flops = 2 * h * c.vocab_size;
  cost.matmul_flops = 2 * layer * c.num_layers;
  cost.weight_bytes = 2 * (layer * c.num_layers + h * c.vocab_size);
  cost.kv_bytes_per_pos = 2 * kv * 4 * c.num_layers;
  cost.attn_flops_per_ctx = 4 * q * c.num_layers;
  return cost;
}

std::pair<double, double> RunOnce(Backend& backend, int batch, int prompt_len, int steps,
                                  int block_size, int blocks_per_seq, bool synthetic_context, int prefill_start) {
  const int vocab = backend.config().vocab_size;
  std::vector<std::vector<int32_t>> tables(batch), prompts(batch);
  std::vector<int32_t> next(batch);
  for (int s = 0; s < batch; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    for (int i = 0; i < prompt_len; ++i) prompts[s].push_back((s * 7919 + i * 131) % vocab);
  }
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  std::vector<ForwardSequence> fwd(batch);
  for (int s = 0; s < batch; ++s) fwd[s] = {prompts[s], prefill_start, tables[s], 1};
  double t0 = Now();
  absl::Status st = synthetic_context ? absl::OkStatus() : backend.Forward(fwd, logits.data());
  const double prefill = synthetic_context ? 0.0 : static_cast<double>(batch) * prompt_len / (Now() - t0);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    std::exit(1);
  }
  t0 = Now();
  for (int step = 0; step < steps; ++step) {
    for (int s = 0; s < batch; ++s) {
      // Fixed token stream, no sampling (as llama-bench): an argmax over
      // 128k logits would be timed as backend work (~15% of a tiny step).
      next[s] = (s * 7919 + (prompt_len + step) * 131) % vocab;
      fwd[s] = {{&next[s], 1}, prompt_len + step, tables[s], 1};
    }
    st = backend.Forward(fwd, logits.data());
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      std::exit(1);
    }
  }
  const double decode = static_cast<double>(batch) * steps / (Now() - t0);
  return {prefill, decode};
}

}  // namespace floe
