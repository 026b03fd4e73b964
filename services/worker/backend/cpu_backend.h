// The CPU implementation of Backend: the Llama-family forward pass (Llama,
// Mistral, Qwen2 with qkv bias, Qwen3 with q/k norm) over a paged f32 KV cache.
//
// Weights: matrices are repacked once at construction into panel form (see
// kernels/cpu/matmul.h), with q|k|v and gate|up fused; norms and biases are
// copied to f32. The embedding table is read in place, so `weights` (and the
// memory behind its views) must outlive the backend.
// Numerics: f32 activations and accumulation; a token's results do not
// depend on the batch around it or on how its prompt was chunked (every
// per-row kernel is batch-invariant by construction, see matmul.h).
// KV cache: per layer, K and V arrays of [num_blocks][kv_heads][block_size][head_dim]
// f32 (kernels/cpu/attention.h).
// Threading: as Backend; Forward spreads its work over num_threads threads
// (the calling thread plus num_threads-1 workers owned by the backend).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "services/worker/backend/backend.h"
#include "services/worker/model/checkpoint.h"

namespace floe {

struct CpuBackendOptions {
  int num_threads = 0;  // 0: std::thread::hardware_concurrency()
};

class CpuBackend final : public Backend {
 public:
  // Validates every weight's shape and dtype against `config` (errors name the
  // tensor) and packs the matrices.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const ModelConfig& config,
                                                            const ModelWeights& weights,
                                                            const CpuBackendOptions& options);
  ~CpuBackend() override;

  const ModelConfig& config() const override { return config_; }
  size_t KvBytesPerBlock(int block_size) const override;
  absl::Status AllocateKvCache(int num_blocks, int block_size) override;
  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override;
  std::span<const float> LastHiddenStates() const override;
  absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) override;

 private:
  struct Layer;
  CpuBackend(const ModelConfig& config, const ModelWeights& weights, int num_threads);
  absl::Status ValidateBatch(std::span<const ForwardSequence> batch) const;
  cpu::KvLayer LayerKv(int layer);
  void EnsureWorkspace(int64_t rows, int64_t logit_rows, int64_t max_context);
  template <class Fn>
  void ForRows(int64_t rows, const Fn& fn);
  // cpu::Matmul on the backend's pool and scratch.
  void Matmul(const float* x, int64_t rows, const cpu::PackedMatrix& w, float* y,
              int64_t ldx = -1) {
    cpu::Matmul(x, rows, w, y, pool_, ldx, &matmul_scratch_);
  }

  ModelConfig config_;
  const ModelWeights& weights_;
  cpu::ThreadPool pool_;
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
  cpu::PackedMatrix lm_head_;
  std::vector<float> inv_freq_;
  int q_dim_ = 0, kv_dim_ = 0;

  int num_blocks_ = 0, block_size_ = 0;
  std::vector<float> kv_cache_;  // [layer][K|V][num_blocks][kv_heads][block_size][head_dim]

  // Activations, grown on demand and reused across steps.
  std::vector<float> x_, xn_, qkv_, attn_, gate_up_, cos_, sin_, scratch_, final_rows_;
  cpu::MatmulScratch matmul_scratch_;
  std::vector<cpu::AttentionSeq> seqs_;
  std::vector<int32_t> tokens_, positions_;
  std::vector<int32_t> tree_path_begin_, tree_paths_;  // cpu::AppendTreePaths of the step's trees
  std::vector<int64_t> logit_rows_;
  int64_t hidden_rows_ = 0;  // rows of final_rows_ the last Forward filled
};

}  // namespace floe
