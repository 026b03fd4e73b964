// What the forward benchmarks of both backends share (bench_cpu_forward,
// bench/gpu/bench_cuda_forward): a model's cost per token for the roofs, and
// one timed run of prefill then decode through any Backend.
#pragma once

#include <utility>

#include "services/worker/backend/backend.h"
#include "services/worker/model/model_config.h"

namespace floe {

// What one token costs: matrix bytes streamed per step (bf16, shared by the
// batch), f32 KV bytes per cached position, and matmul FLOPs per token.
struct ModelCost {
  double weight_bytes = 0, kv_bytes_per_pos = 0, matmul_flops = 0, lm_head_flops = 0;
  double attn_flops_per_ctx = 0;  // attention FLOPs per token per context position
};

ModelCost CostOf(const ModelConfig& c);

// Runs `batch` sequences: prefill `prompt_len` tokens each (one Forward), then
// `steps` decode steps over blocks [s * blocks_per_seq, ...) of sequence s;
// returns {prefill tok/s, decode tok/s (aggregate)}. Exits 1 on a failed
// Forward, printing its status. `synthetic_context`: no prefill (0 tok/s);
// decoding starts at position prompt_len over whatever the cache holds there,
// which costs what a real context of that length costs (attention reads
// every cached position whatever its values). `prefill_start` > 0: the
// prompt is one chunk at that position over a synthetic context before it
// (a late chunk of a long prompt's chunked prefill).
std::pair<double, double> RunOnce(Backend& backend, int batch, int prompt_len, int steps, int block_size,
                                  int blocks_per_seq, bool synthetic_context = false,
                                  int prefill_start = 0);

}  // namespace floe
