#include "services/worker/parallel/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

// Share of the vendor's peak that serving kernels reach on Hopper: dense
// bf16 GEMMs at large M (cuBLASLt) and weight streaming at decode.
constexpr double kGpuFlopsEfficiency = 0.7;
constexpr double kGpuMemoryEfficiency = 0.8;
// NVLink 4: 450 GB/s each way per GPU; NCCL's ring reaches about 80% of it.
constexpr double kNvlinkBandwidth = 450e9 * 0.8;
// One hop of an NCCL collective inside a CUDA graph (a small ring
// all-reduce over 8 GPUs, 14 hops: about 17 us).
constexpr double kNcclLatency = 1.2e-6;

}  // namespace

Hardware H100Sxm() {
  Hardware h;
  h.name = "h100";
  h.flops = 989e12 * kGpuFlopsEfficiency;
  h.memory_bandwidth = 3.35e12 * kGpuMemoryEfficiency;
  h.link_bandwidth = kNvlinkBandwidth;
  h.collective_latency = kNcclLatency;
  h.step_overhead = 1e-3;  // scheduling, sampling and the plan's host-to-device copy
  h.activation_bytes = 2;
  h.weight_bytes = 2;
  h.kv_bytes = 2;
  h.memory_capacity = 80e9;
  return h;
}

Hardware H200Sxm() {
  Hardware h = H100Sxm();
  h.name = "h200";
  h.memory_bandwidth = 4.8e12 * kGpuMemoryEfficiency;
  h.memory_capacity = 141e9;
  return h;
}

Hardware CpuRankThread() {
  // One thread of the 2-core AVX512-BF16 host CI runs on, with the other
  // rank's thread busy beside it, as `bench_shift --calibrate` measures them
  // (2026-12-05, three runs: bf16 GEMM of 256 rows 222-225 GFLOP/s; GEMV
  // streaming a 64 MiB weight 30-41 GB/s; Gloo on loopback 1.1-2.2 GB/s at
  // 4 MiB; a 2-rank all-reduce (2 hops) right after a stretch of compute
  // 0.81 ms, where idle it takes 74-94 us: Gloo's I/O thread waits for a
  // core the compute threads hold).
  Hardware h;
  h.name = "cpu";
  h.flops = 220e9;
  h.memory_bandwidth = 32e9;
  h.link_bandwidth = 1.5e9;
  h.collective_latency = 0.4e-3;
  h.step_overhead = 0;
  h.activation_bytes = 4;  // f32 activations
  h.weight_bytes = 2;
  h.kv_bytes = 4;  // f32 KV cache
  return h;
}

absl::StatusOr<Hardware> GpuByName(const std::string& name) {
  if (name == "h100") return H100Sxm();
  if (name == "h200") return H200Sxm();
  return absl::InvalidArgumentError(absl::StrCat("gpu \"", name, "\": expected h100 or h200"));
}

StepWork CountStep(const ModelConfig& m, Grid grid, ParallelMode mode, const StepLoad& load) {
  const double h = m.hidden_size, d = m.head_dim, inter = m.intermediate_size;
  const int world = grid.world();
  const bool sp = mode == ParallelMode::kSequence && grid.sequence > 1;
  // Every rank's heads in both modes; KV heads replicated where fewer than ranks.
  const double q_heads = static_cast<double>(m.num_heads) / world;
  const double kv_heads = std::max(1.0, static_cast<double>(m.num_kv_heads) / world);
  // Rows this rank runs its linears on, and the weight elements it reads:
  // its own heads and MLP rows (TP), its SP group's (SP).
  const double rows = sp ? std::ceil(static_cast<double>(load.tokens) / grid.sequence) : load.tokens;
  const double groups = sp ? grid.sequence : 1;
  const double layer_weights = groups * (h * (q_heads + 2 * kv_heads) * d + q_heads * d * h + 3 * h * inter / world);
  // The lm_head is vocab-parallel over every rank; rank 0 gathers the logits.
  const double vocab_slice = static_cast<double>(m.vocab_size) / world;
  StepWork w;
  w.linear_flops = m.num_layers * 2 * rows * layer_weights + 2.0 * load.logit_rows * h * vocab_slice;
  w.weight_elements = m.num_layers * layer_weights + h * vocab_slice;
  if (world > 1) {
    const double rank0_slice = std::floor(vocab_slice);
    w.gather = {1, load.logit_rows * (m.vocab_size - rank0_slice), world};
  }
  w.attention_flops = m.num_layers * 4.0 * load.attended * d * q_heads;
  w.kv_elements = m.num_layers * 2.0 * load.kv_tokens * kv_heads * d;
  if (sp) {
    const int s = grid.sequence;
    // Per layer: this rank's rows' q|k|v of the others' heads out, its
    // heads' attention of the others' rows back; then the TP group's sums.
    // At the end, the logits rows' final states to the SP group.
    const double others_rows = load.tokens - rows;
    w.all_to_all = {2 * m.num_layers + 1,
                    m.num_layers * ((s - 1) * rows * (q_heads + 2 * kv_heads) * d + others_rows * q_heads * d) +
                        (s - 1) * load.logit_rows * h,
                    s};
    if (grid.tensor > 1) w.all_reduce = {2 * m.num_layers, 2.0 * m.num_layers * rows * h, grid.tensor};
  } else if (world > 1) {
    w.all_reduce = {2 * m.num_layers, 2.0 * m.num_layers * rows * h, world};
  }
  return w;
}

StepTime PredictStep(const ModelConfig& m, const Hardware& hw, Grid grid, ParallelMode mode, const StepLoad& load) {
  const StepWork w = CountStep(m, grid, mode, load);
  // Rooflines per layer (every layer alike), then the lm_head.
  auto roofline = [&](double flops, double bytes) { return std::max(flops / hw.flops, bytes / hw.memory_bandwidth); };
  const double lm_elements = static_cast<double>(m.hidden_size) * m.vocab_size / grid.world();
  const double lm_flops = 2.0 * load.logit_rows * lm_elements;
  StepTime t;
  t.linear = m.num_layers * roofline((w.linear_flops - lm_flops) / m.num_layers,
                                     (w.weight_elements - lm_elements) * hw.weight_bytes / m.num_layers) +
             roofline(lm_flops, lm_elements * hw.weight_bytes);
  t.attention = m.num_layers * roofline(w.attention_flops / m.num_layers, w.kv_elements * hw.kv_bytes / m.num_layers);
  // Ring all-reduce: 2 (n-1)/n of the buffer each way; all-to-all: what leaves the rank.
  const StepWork::Collective& ar = w.all_reduce;
  const StepWork::Collective& a2a = w.all_to_all;
  if (ar.calls > 0)
    t.communication += ar.calls * 2.0 * (ar.ranks - 1) * hw.collective_latency +
                       2.0 * (ar.ranks - 1) / ar.ranks * ar.elements * hw.activation_bytes / hw.link_bandwidth;
  if (a2a.calls > 0)
    t.communication += a2a.calls * (a2a.ranks - 1.0) * hw.collective_latency +
                       a2a.elements * hw.activation_bytes / hw.link_bandwidth;
  if (w.gather.calls > 0)
    t.communication += (w.gather.ranks - 1.0) * hw.collective_latency +
                       w.gather.elements * hw.activation_bytes / hw.link_bandwidth;
  t.overhead = hw.step_overhead;
  return t;
}

int64_t PredictShiftThreshold(const ModelConfig& m, const Hardware& hw, Grid grid) {
  if (grid.sequence <= 1) return kNeverShift;
  auto sp_wins = [&](int64_t tokens) {
    const StepLoad load{.tokens = tokens, .kv_tokens = tokens, .logit_rows = 1, .attended = tokens * (tokens + 1) / 2};
    return PredictStep(m, hw, grid, ParallelMode::kSequence, load).total() <=
           PredictStep(m, hw, grid, ParallelMode::kTensor, load).total();
  };
  // The first token count where SP x TP wins, by doubling then bisection
  // (the difference of the two grows with the tokens past the crossover).
  int64_t hi = 1;
  while (!sp_wins(hi)) {
    if (hi >= (int64_t{1} << 20)) return kNeverShift;
    hi *= 2;
  }
  int64_t lo = hi / 2;  // loses (or 0)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (sp_wins(mid) ? hi : lo) = mid;
  }
  return hi;
}

std::vector<std::pair<int, double>> RooflineStepCostCurve(const ModelConfig& m, const Hardware& hw, Grid grid,
                                                          absl::FunctionRef<ParallelMode(int64_t)> mode_for,
                                                          int max_tokens) {
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n < max_tokens; n *= 2) sizes.push_back(n);
  if (max_tokens >= 1) sizes.push_back(max_tokens);
  std::vector<std::pair<int, double>> points;
  for (const int64_t n : sizes) {
    const StepLoad load{.tokens = n, .kv_tokens = n, .logit_rows = n, .attended = n * (n + 1) / 2};
    const StepTime t = PredictStep(m, hw, grid, mode_for(n), load);
    points.emplace_back(static_cast<int>(n), (t.total() - t.overhead) * 1e3);
  }
  return points;
}

}  // namespace floe
