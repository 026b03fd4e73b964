// The CPU implementation of Backend: it owns the memory (packed weights,
// the paged f32 KV cache, the step's activations) and implements ModelOps
// over kernels/cpu; the model itself (services/worker/model/llama_forward.h)
// is written once over those ops.
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
#include "services/worker/model/llama_forward.h"
#include "services/worker/model/model_ops.h"
#include "services/worker/model/parallel_layout.h"
#include "services/worker/parallel/communicator.h"

namespace floe {

struct CpuBackendOptions {
  int num_threads = 0;  // 0: std::thread::hardware_concurrency()
  // Tensor parallel: this rank's group (null: one rank). The backend holds
  // its rank's shard of the weights and of the KV heads and all-reduces the
  // row-parallel projections; every rank must run the same batches.
  Communicator* communicator = nullptr;
  // With a communicator: Ulysses sequence parallel instead (T = 1): full
  // weights, the step's rows split over the ranks, the KV cache and the
  // attention split by heads, two all-to-alls per layer. Every rank's
  // outputs are bit-identical to one rank's (every kernel is batch-invariant).
  bool sequence_parallel = false;
};

class CpuBackend final : public Backend, private ModelOps {
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
  CpuBackend(const ModelConfig& config, int num_threads);
  absl::Status ValidateBatch(std::span<const ForwardSequence> batch) const;
  cpu::KvLayer LayerKv(int layer);
  template <class Fn>
  void ForRows(int64_t rows, const Fn& fn);
  float* Rows(Activation a);
  int64_t Width(Activation a) const;

  // ModelOps over kernels/cpu.
  WeightId PrepareMatrix(std::span<const TensorView> parts) override;
  WeightId PrepareVector(std::span<const TensorView> parts) override;
  void PrepareEmbedding(const TensorView& table) override { embed_tokens_ = table; }
  void BeginStep(const StepRows& rows) override;
  void Embed(Activation x) override;
  void RmsNorm(Activation in, WeightId weight, Activation out) override;
  void Matmul(Activation in, WeightId matrix, Activation out) override;
  void PrepareQk(Activation qkv, WeightId bias, WeightId q_norm, WeightId k_norm) override;
  void WriteKv(int layer, Activation qkv) override;
  void Attention(int layer, Activation qkv, Activation out) override;
  void AddRmsNorm(Activation x, Activation delta, WeightId weight, Activation out) override;
  void SiluMul(Activation gate_up) override;
  void Add(Activation x, Activation delta) override;
  void GatherRmsNorm(Activation in, WeightId weight, Activation out) override;
  void Logits(Activation in, WeightId matrix, float* logits) override;
  void AllReduce(Activation x) override;
  void SequenceToHeads(Activation qkv_rows, Activation qkv_heads) override;
  void HeadsToSequence(Activation attn_heads, Activation attn_rows) override;
  // Rows rank j holds of the step's all_rows_ (contiguous blocks in rank order).
  int64_t RowBegin(int j) const { return all_rows_ * j / sp_size_; }

  ModelConfig config_;
  ModelConfig local_;  // config_ with this rank's heads, KV heads and intermediate size
  Communicator* communicator_ = nullptr;
  absl::Status step_status_;  // a collective's failure during the current Forward
  cpu::ThreadPool pool_;
  std::unique_ptr<LlamaForward> model_;
  TensorView embed_tokens_;
  std::vector<cpu::PackedMatrix> matrices_;  // by WeightId
  std::vector<std::vector<float>> vectors_;  // by WeightId
  std::vector<float> inv_freq_;
  int q_dim_ = 0, kv_dim_ = 0;  // this rank's heads (attention, KV cache)
  // Heads in a kQkv / kAttn row: this rank's (one rank, TP), all of them (SP).
  int row_heads_ = 0, row_kv_heads_ = 0;
  // Sequence parallel: this rank in its group, every rank's heads.
  int sp_rank_ = 0, sp_size_ = 1;
  std::vector<ParallelLayout> sp_heads_;
  std::vector<float> qkv_heads_, attn_heads_, a2a_send_, a2a_recv_, final_local_;
  std::vector<int64_t> send_counts_, recv_counts_;
  std::vector<int64_t> sp_logit_rows_;  // this rank's logits rows (local indices)

  int num_blocks_ = 0, block_size_ = 0;
  std::vector<float> kv_cache_;  // [layer][K|V][num_blocks][kv_heads][block_size][head_dim]

  // The step (BeginStep) and its activations, grown on demand and reused.
  std::span<const int32_t> tokens_, positions_;
  std::span<const int64_t> logit_rows_;
  int64_t rows_ = 0, max_context_ = 0;  // rows_: this rank's rows of the step
  int64_t row0_ = 0, all_rows_ = 0;        // its first row, and the step's rows
  std::vector<float> x_, xn_, qkv_, attn_, gate_up_, cos_, sin_, scratch_, final_rows_;
  cpu::MatmulScratch matmul_scratch_;
  std::vector<cpu::AttentionSeq> seqs_;
  std::vector<int32_t> tree_path_begin_, tree_paths_;  // cpu::AppendTreePaths of the step's trees
  int64_t hidden_rows_ = 0;  // rows of final_rows_ the last Forward filled
};

}  // namespace floe
