#include "services/worker/parallel/serving_plan.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace floe {

double ModelParameters(const ModelConfig& m) {
  const double h = m.hidden_size, d = m.head_dim;
  const double layer = h * (m.num_heads + 2.0 * m.num_kv_heads) * d + m.num_heads * d * h + 3.0 * h * m.intermediate_size;
  const double embeddings = (m.tie_word_embeddings ? 1.0 : 2.0) * m.vocab_size * h;
  return m.num_layers * (layer + 2 * h) + embeddings + h;
}

namespace {

// One step's time on `grid` with `tokens` scheduled, of which `logit_rows`
// are sampled, over `sequences` sequences of mean context `context`; in
// `mode`, or (shift) the mode the threshold picks.
double Step(const ModelConfig& m, const Hardware& hw, Grid grid, const std::string& mode, int64_t threshold,
            int64_t tokens, int64_t prompt_tokens, int64_t sequences, double context) {
  ParallelMode pm = ParallelMode::kTensor;
  if (mode == "sp" || (mode == "shift" && tokens >= threshold)) pm = ParallelMode::kSequence;
  StepLoad load;
  load.tokens = tokens;
  load.logit_rows = sequences;
  load.kv_tokens = static_cast<int64_t>(sequences * context);
  // Decode rows attend to their context; a prompt's rows to its prefix, n^2 / 2.
  const int64_t decode_rows = tokens - prompt_tokens;
  load.attended = static_cast<int64_t>(decode_rows * context + prompt_tokens * (prompt_tokens + 1) / 2.0);
  return PredictStep(m, hw, grid, pm, load).total();
}

}  // namespace

ServingPlan PlanServing(const ModelConfig& m, const Hardware& gpu, int gpus, const Workload& w) {
  ServingPlan plan;
  plan.gpus = gpus;
  plan.weight_bytes = ModelParameters(m) * gpu.weight_bytes;
  plan.kv_bytes_per_token = 2.0 * m.num_layers * m.num_kv_heads * m.head_dim * gpu.kv_bytes;
  // The fewest GPUs (a power of two dividing `gpus`) whose memory holds the
  // weights with a fifth to spare for the KV: DP's replica size and SP's TP
  // degree (Arctic's TP2 x SP4 for a 16-bit 70B on 8 H100s).
  int smallest = 1;
  while (smallest < gpus && (gpus % (smallest * 2) == 0) && plan.weight_bytes / smallest > 0.8 * gpu.memory_capacity)
    smallest *= 2;
  const std::pair<const char*, std::array<int, 3>> layouts[] = {{"dp", {smallest, 1, gpus / smallest}},
                                                                {"tp", {gpus, 1, 1}},
                                                                {"sp", {smallest, gpus / smallest, 1}},
                                                                {"shift", {smallest, gpus / smallest, 1}}};
  const int64_t in = w.prompt_tokens, out = std::max<int64_t>(1, w.output_tokens);
  for (const auto& [name, shape] : layouts) {
    PlanMode mode{name, shape[0], shape[1], shape[2], {}};
    const Grid grid{shape[0], shape[1]};
    const std::string mode_name = name;
    if (mode_name == "shift") plan.shift_threshold = PredictShiftThreshold(m, gpu, grid);
    // DP: a replica on one GPU is TP of one.
    const std::string step_mode = mode_name == "dp" ? "tp" : mode_name;
    // Weights per GPU: sharded over the TP degree (Floe's shift holds them once).
    const double weights_per_gpu = plan.weight_bytes / grid.tensor;
    for (int64_t c : w.concurrency) {
      PlanPoint p;
      p.concurrency = c;
      const int64_t per_replica = (c + mode.replicas - 1) / mode.replicas;  // the busiest replica's share
      const double context = in + out / 2.0;
      const double mixed = Step(m, gpu, grid, step_mode, plan.shift_threshold, in + per_replica - 1, in, per_replica,
                                context);
      const double decode = Step(m, gpu, grid, step_mode, plan.shift_threshold, per_replica, 0, per_replica, context);
      const double mixed_share = std::min(1.0, static_cast<double>(per_replica) / out);
      p.ttft_s = mixed;
      p.tpot_s = mixed_share * mixed + (1 - mixed_share) * decode;
      p.throughput_tok_s = std::min<int64_t>(c, per_replica * mode.replicas) / p.tpot_s;
      p.completion_s = p.ttft_s + (out - 1) * p.tpot_s;
      // KV of the replica's sequences, sharded over its GPUs by heads (replicated below one KV head each).
      const double kv_share = std::max(1.0 / (grid.world()), 1.0 / m.num_kv_heads);
      const double kv_per_gpu = per_replica * (in + out) * plan.kv_bytes_per_token * kv_share;
      p.fits = weights_per_gpu + kv_per_gpu <= gpu.memory_capacity * 0.9;
      mode.points.push_back(p);
    }
    plan.modes.push_back(std::move(mode));
  }
  return plan;
}

}  // namespace floe
