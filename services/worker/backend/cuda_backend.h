// The CUDA implementation of Backend: the model (model/llama_forward.h),
// written once over ModelOps, runs on one GPU with kernels/cuda and
// cuBLASLt. Built only where nvcc is found (FLOE_HAVE_CUDA); callers include
// no CUDA header.
//
// Memory: bf16 (or f32) weights in device memory, q|k|v and gate|up fused as
// the model prepares them; norms and biases in f32. The paged KV cache is
// f32 in device memory, laid out as the CPU backend's
// ([layer][K|V][num_blocks][kv_heads][block_size][head_dim]); KvCacheBudget
// sizes it from --gpu-memory-utilization as vLLM does (per worker). Activations are
// sized once for the largest step the engine may run (ReserveActivations)
// and grow only past it.
// Numerics: f32 activations; a bf16 matrix's input is rounded to bf16 and
// its GEMM (cuBLASLt) accumulates in f32, as the CPU kernels do; attention
// and norms in f32. Results agree with the CPU backend's to f32 rounding
// (summation order differs), not bit for bit.
// A step: one host-to-device copy of its plan (tokens, attention layout,
// RoPE angles) from pinned memory, the kernels on one stream, the logits
// back to the caller's buffer, one synchronize. The engine's usual step
// keeps the logits on the device and samples there (SampleLogits,
// kernels/cuda/sampling.h): only the drawn tokens come back, through pinned
// memory, and the rows the host must sample. A CUDA error fails the step
// with INTERNAL naming the op; the device's state is then not trusted
// (healthy() turns false for good).
//
// Several GPUs: one rank per GPU, each holding its shard, the model's
// collectives over NCCL on device memory (TP, or Ulysses SP x TP per step,
// as the CPU backend's ranks); the step stream is synchronized before each
// collective, which runs on the communicator's stream.
// Threading: as Backend (one engine thread); the device is made current on
// every call, so the calling thread may change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/model_kernels.h"
#include "services/worker/backend/backend.h"
#include "services/worker/model/checkpoint.h"

namespace floe {

class Communicator;

struct CudaBackendOptions {
  int device = 0;  // CUDA device ordinal
  // Several ranks (null: one rank), one GPU each, as CpuBackendOptions:
  // `communicator` spans every rank of the worker, a grid of T x S with S =
  // sequence_parallel_size (model/parallel_layout.h); sequence_group and
  // tensor_group are this rank's SP and TP groups (null where the group is
  // the whole worker). Each must take device memory (NcclCommunicator).
  // Steps run in the mode SetParallelMode last set, every rank the same.
  Communicator* communicator = nullptr;
  int sequence_parallel_size = 1;
  Communicator* sequence_group = nullptr;
  Communicator* tensor_group = nullptr;
  // Decode steps (one token per sequence) replay CUDA graphs captured per
  // padded batch size (1, 2, 4, ... 256), as vLLM's; false runs every step
  // eagerly (floe-worker --enforce-eager).
  bool cuda_graphs = true;
  // Called once, on the engine thread, when a CUDA error fails a step (the
  // step's requests then fail with its INTERNAL status). The worker stops
  // serving and exits: a device in an unknown state must not answer.
  std::function<void(const absl::Status&)> on_fault;
  // The KV cache's element type (--kv-cache-dtype), as CpuBackendOptions':
  // bf16 halves the bytes per cached token, fp8 e4m3 quarters them; fp8's
  // per-layer scales: layer i's k_scale at [2i], v_scale at [2i + 1]
  // (empty: 1.0).
  cuda::KvDtype kv_dtype = cuda::KvDtype::kF32;
  std::vector<float> kv_scales;
};

class CudaBackend : public Backend {
 public:
  // Validates the config and every weight (errors name the tensor) and
  // uploads the weights. Fails with RESOURCE_EXHAUSTED, giving the sizes,
  // when they do not fit in the device's free memory.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const ModelConfig& config,
                                                             const ModelWeights& weights,
                                                             const CudaBackendOptions& options);

  // "NVIDIA H200 (device 0, 139.8 GiB)".
  virtual const std::string& device_name() const = 0;
  // Bytes of weights in device memory.
  virtual size_t WeightBytes() const = 0;
  // Allocates the activations of a step of up to `max_rows` tokens and
  // `max_logit_rows` logits rows now, so that steps do not allocate.
  virtual absl::Status ReserveActivations(int64_t max_rows, int64_t max_logit_rows) = 0;
  // What the KV cache may take: utilization x the device's memory, less
  // what this backend holds already (weights, activations), and at most
  // what is free (other workers may share the GPU, each with its share, as
  // vLLM's instances do). RESOURCE_EXHAUSTED, with the numbers, when nothing
  // is left.
  virtual absl::StatusOr<int64_t> KvCacheBudget(double utilization) const = 0;
  // False once a CUDA error has been seen: the worker stops serving.
  virtual bool healthy() const = 0;
};

}  // namespace floe
