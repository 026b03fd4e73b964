// Shift Parallelism's cost model: the time of one forward step of a model on
// a T x S grid of ranks (model/parallel_layout.h), in the TP mode (all T S
// ranks tensor parallel) or the SP x TP mode, from the step's scheduled
// tokens and the hardware's figures. It picks the worker's shift threshold
// (the fewest tokens from which SP x TP is the faster mode) and is the
// engine of `floe plan`.
//
// Per layer and rank, each mode's linear layers cost the larger of their
// FLOPs over the rank's compute rate and their weight bytes over its memory
// bandwidth (a roofline: decode streams the weights, prefill is
// compute-bound); attention's FLOPs and KV reads are the same in both modes
// (each rank holds the same heads) and added once; every collective costs
// its hops' latency plus its bytes over the link bandwidth (ring all-reduce:
// 2 (n-1) hops and 2 (n-1)/n of the data; all-to-all: n-1 hops and what
// leaves the rank).
// TP moves the rows' hidden states twice a layer over all ranks and reads
// 1/(T S) of the weights; SP x TP splits the rows S ways, moves only q|k|v
// and the attention output within its SP group, and reads 1/T of them. So
// TP wins while steps are memory-bound and SP x TP once the TP mode's
// all-reduces outgrow the extra weight reads.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "services/worker/model/forward_batch.h"
#include "services/worker/model/model_config.h"

namespace floe {

struct Hardware {
  std::string name;
  double flops = 0;               // FLOP/s one rank sustains in the model's GEMMs
  double memory_bandwidth = 0;    // bytes/s one rank streams its weights and KV at
  double link_bandwidth = 0;      // bytes/s one rank sends (and receives) in a collective
  // Seconds per hop of a collective beyond its bytes: one round of messages
  // (a ring all-reduce over n ranks takes 2 (n-1) of them, an all-to-all or
  // a gather n-1, a message to each other rank).
  double collective_latency = 0;
  double step_overhead = 0;       // seconds per step outside the model (plan, sampling)
  double activation_bytes = 4;    // bytes per activation element on the wire
  double weight_bytes = 2;        // bytes per weight element
  double kv_bytes = 4;            // bytes per cached K or V element
  double memory_capacity = 0;     // bytes per rank (floe plan: room for the KV cache)
};

// Named figures. GPUs: the vendor's dense bf16 peak and memory bandwidth at
// the efficiency serving kernels reach (named below), NVLink 4 at NCCL's
// achievable bus bandwidth. CPU: one thread of this project's AVX512-BF16
// host with Gloo over loopback TCP, measured by bench/parallel (docs/shift-parallelism.md).
// PCIe Gen5 x16 without NVLink: NCCL's achievable bandwidth each way.
inline constexpr double kPcieBandwidth = 25e9;
Hardware H100Sxm();
Hardware H200Sxm();
Hardware CpuRankThread();
// "h100" or "h200"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<Hardware> GpuByName(const std::string& name);

struct Grid {
  int tensor = 1, sequence = 1;
  int world() const { return tensor * sequence; }
};

// What a step runs: its scheduled tokens (rows), the KV its attention reads
// (the sum over the step's sequences of their context lengths) and its
// logits rows (sampled on rank 0).
struct StepLoad {
  int64_t tokens = 1;
  int64_t kv_tokens = 0;
  int64_t logit_rows = 1;
  // Sum over rows of the positions each attends to (decode: its context;
  // a prefill chunk of n over c cached: about n c + n^2 / 2).
  int64_t attended = 0;
};

// What one rank does in a step: the busiest rank (SP: the one holding the
// most rows). Element counts; the hardware turns them into time.
struct StepWork {
  double linear_flops = 0;    // the linear layers' and lm_head's multiply-adds x 2
  double weight_elements = 0;  // weight elements the linear layers read
  double attention_flops = 0;
  double kv_elements = 0;      // K and V elements attention reads
  // Collectives: calls and the elements handed to them (an all-reduce's
  // buffer; what an all-to-all sends to the other ranks), and the group size.
  struct Collective {
    int calls = 0;
    double elements = 0;
    int ranks = 1;
  };
  Collective all_reduce, all_to_all;
  // Vocab-parallel logits gathered on rank 0: the elements it receives.
  Collective gather;
};

StepWork CountStep(const ModelConfig& model, Grid grid, ParallelMode mode, const StepLoad& load);

struct StepTime {
  double linear = 0;         // roofline of the linear layers (and lm_head)
  double attention = 0;      // roofline of attention
  double communication = 0;  // collectives
  double overhead = 0;
  double total() const { return linear + attention + communication + overhead; }
};

StepTime PredictStep(const ModelConfig& model, const Hardware& hw, Grid grid, ParallelMode mode,
                     const StepLoad& load);

// The fewest scheduled tokens (prefill-like steps: one logits row, short
// contexts) from which the SP x TP mode is predicted no slower than TP;
// kNeverShift where it never is within 1 << 20 tokens (or S = 1).
inline constexpr int64_t kNeverShift = int64_t{1} << 62;
int64_t PredictShiftThreshold(const ModelConfig& model, const Hardware& hw, Grid grid);

// The draft budget's step cost curve (tokens run -> ms) from the roofline,
// for a GPU backend where nothing was measured: the forward of one sequence
// of N tokens from position 0, every row with logits (what MeasureStepCost
// times on the CPU), at N = 1, 2, 4, ... and max_tokens, each N in the mode
// `mode_for(N)` picks; without hw.step_overhead (the engine measures what a
// step spends outside the forward and adds it). Flat while the weights
// stream, then linear in N once the GEMMs are compute-bound: the knee the
// plan needs, which a measurement stopping at 64 tokens would not reach.
std::vector<std::pair<int, double>> RooflineStepCostCurve(const ModelConfig& model, const Hardware& hw, Grid grid,
                                                          absl::FunctionRef<ParallelMode(int64_t)> mode_for,
                                                          int max_tokens);

}  // namespace floe
