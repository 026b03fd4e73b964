// `floe plan`'s predictions: time to first token, time per output token and
// throughput of a model served on N GPUs as data parallel replicas (DP),
// tensor parallel over all N (TP), Ulysses SP x TP over all N (SP) and Shift
// Parallelism between those two (shift), across load, from the cost model
// (cost_model.h). DP replicas and SP's TP degree are the fewest GPUs whose
// memory holds the weights (one, where the model fits one GPU).
//
// Load: `concurrency` requests in flight (a closed loop), each with
// prompt_tokens in and output_tokens out. In steady state a batch of c
// sequences decodes one token per step, and each of them is replaced once
// per output_tokens steps, so of every output_tokens steps c carry a new
// prompt beside the others' decode tokens (mixed steps) and the rest decode
// only. Then
//   TTFT       = one mixed step (the prompt whole, as with a batched-token
//                budget of at least the prompt; queueing not counted),
//   TPOT       = the mean step time over that cycle,
//   throughput = c / TPOT output tokens per second (DP: N replicas of c/N),
//   completion = TTFT + (output_tokens - 1) TPOT.
// Shift runs each step in the mode its scheduled tokens pick (the cost
// model's threshold), so it is never slower than the better of TP and SP at
// a step, though the pick rests on the same model. A layout whose weights
// and KV at that load do not fit the GPUs' memory is marked so.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "services/worker/model/model_config.h"
#include "services/worker/parallel/cost_model.h"

namespace floe {

struct Workload {
  int64_t prompt_tokens = 2000;  // the Shift Parallelism paper's harness: 2000 in, 250 out
  int64_t output_tokens = 250;
  std::vector<int64_t> concurrency = {1, 2, 4, 8, 16, 32, 64, 128, 256};
};

struct PlanPoint {
  int64_t concurrency = 0;
  double ttft_s = 0, tpot_s = 0, throughput_tok_s = 0, completion_s = 0;
  bool fits = true;  // weights + the load's KV within the GPUs' memory
};

struct PlanMode {
  std::string name;  // dp, tp, sp, shift
  int tensor = 1, sequence = 1, replicas = 1;
  std::vector<PlanPoint> points;  // one per Workload::concurrency
};

struct ServingPlan {
  int gpus = 1;
  int64_t shift_threshold = kNeverShift;  // of the shift layout
  double weight_bytes = 0;        // the whole model's
  double kv_bytes_per_token = 0;  // every layer's K and V, all heads
  std::vector<PlanMode> modes;    // dp, tp, sp, shift
};

ServingPlan PlanServing(const ModelConfig& model, const Hardware& gpu, int gpus, const Workload& workload);

// Total weight elements of the model (embedding, layers, norms, lm_head).
double ModelParameters(const ModelConfig& model);

}  // namespace floe
