// The CPU implementation of Backend: it owns the memory (packed weights,
// the paged f32 KV cache, the step's activations) and implements ModelOps
// over kernels/cpu; the model itself (services/worker/model/llama_forward.h)
// is written once over those ops.
//
// Weights: matrices are repacked once at construction into panel form (see
// kernels/cpu/matmul.h), with q|k|v and gate|up fused, or mapped from the
// weight cache file an earlier start packed them into (weight_cache.h);
// norms and biases are copied to f32. A tied embedding is read from the
// packed lm_head; an untied one in place, so `weights` (and the memory
// behind its views) must outlive the backend.
// Numerics: f32 activations and accumulation; a token's results do not
// depend on the batch around it or on how its prompt was chunked (every
// per-row kernel is batch-invariant by construction, see matmul.h).
// KV cache: per layer, K and V arrays of [num_blocks][kv_heads][block_size][head_dim]
// f32 or bf16 (CpuBackendOptions::kv_dtype; kernels/cpu/attention.h), faulted
// in by a background thread after AllocateKvCache.
// Threading: as Backend; Forward spreads its work over num_threads threads
// (the calling thread plus num_threads-1 workers owned by the backend).
#pragma once

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "services/worker/backend/backend.h"
#include "services/worker/backend/weight_cache.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/llama_forward.h"
#include "services/worker/model/model_ops.h"
#include "services/worker/model/parallel_layout.h"
#include "services/worker/parallel/communicator.h"

namespace floe {

struct CpuBackendOptions {
  int num_threads = 0;  // 0: std::thread::hardware_concurrency()
  // Several ranks (null: one rank): `communicator` spans every rank of the
  // worker, a grid of T x S with S = sequence_parallel_size
  // (model/parallel_layout.h). The backend holds its SP group's shard of
  // the weights and its own KV heads, and runs each step in the mode
  // SetParallelMode last set: TP over every rank (all-reduces) or Ulysses
  // SP x TP (the step's rows split over the SP group, two all-to-alls per
  // layer; all-reduces in the TP group). Every rank must run the same
  // batches in the same modes. With T = 1 the SP mode's outputs are
  // bit-identical to one rank's (every kernel is batch-invariant).
  Communicator* communicator = nullptr;
  int sequence_parallel_size = 1;
  // This rank's SP group (S ranks) and TP group (T ranks); either may be
  // null where it is the whole worker (T = 1, or S = 1).
  Communicator* sequence_group = nullptr;
  Communicator* tensor_group = nullptr;
  // Weight cache (backend/weight_cache.h): with a folder and the weights'
  // fingerprint (Checkpoint::fingerprint()), Create maps this rank's packed
  // matrices from the folder's file for them, or packs and then writes that
  // file. A cache that cannot be read or written costs a repack, never an
  // error; CpuBackend::weight_cache() says what happened.
  std::string weight_cache_dir;
  std::string weights_fingerprint;
  // The folder's bound: writing a file first deletes its least recently
  // used cache files until they all fit (weight_cache.h).
  uint64_t weight_cache_max_bytes = uint64_t{64} << 30;
  // Called after every 256 MiB packed (and once at the end) to say the
  // source weights' pages may be dropped (Checkpoint::ReleasePages): the
  // peak RSS of a repack is then the packed weights plus one such span, not
  // both copies. Null: not called.
  std::function<void()> release_source_pages;
  // The KV cache's element type (--kv-cache-dtype): bf16 halves the bytes
  // per cached token, fp8 (e4m3) quarters them; K and V are rounded to
  // nearest even once, when written, and attention reads them widened
  // exactly (kernels/cpu/attention.h).
  cpu::KvDtype kv_dtype = cpu::KvDtype::kF32;
  // fp8 only: layer i's k_scale at [2i], v_scale at [2i + 1] (a checkpoint's
  // kv_cache_scheme, ModelWeights::kv_scales); empty: 1.0 for every layer.
  std::vector<float> kv_scales;
};

struct WeightCacheReport {
  enum class Outcome { kOff, kHit, kWritten, kFailed };
  Outcome outcome = Outcome::kOff;
  std::string path;
  std::string detail;  // why a miss missed, or why writing failed
  std::vector<std::string> evicted;  // files deleted to keep the folder in its bound
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
  void SetParallelMode(ParallelMode mode) override { mode_ = mode; }

  // Bytes of packed weights this rank holds (its SP group's shard, held once
  // for both modes).
  size_t WeightBytes() const;
  const WeightCacheReport& weight_cache() const { return cache_report_; }

 private:
  CpuBackend(const ModelConfig& config, int num_threads);
  cpu::KvLayer LayerKv(int layer);
  template <class Fn>
  void ForRows(int64_t rows, const Fn& fn);
  float* Rows(Activation a);
  int64_t Width(Activation a) const;

  // Packs this rank's matrices into a new weight cache file at `path`.
  absl::Status WriteWeightCache(const ModelConfig& config, const ModelWeights& weights, const std::string& path,
                                const std::string& key);

  // ModelOps over kernels/cpu.
  WeightId PrepareMatrix(std::span<const TensorView> parts) override;
  WeightId PrepareVector(std::span<const TensorView> parts) override;
  void PrepareEmbedding(const TensorView& table) override;
  WeightId SliceMatrix(WeightId matrix, int64_t row_begin, int64_t row_end, int64_t col_begin,
                       int64_t col_end) override;
  void BeginStep(const StepRows& rows) override;
  void Embed(Activation x) override;
  void RmsNorm(Activation in, WeightId weight, Activation out) override;
  void Matmul(Activation in, WeightId matrix, Activation out) override;
  void PrepareQk(Activation qkv, WeightId bias, WeightId q_norm, WeightId k_norm) override;
  void WriteKv(int layer, Activation qkv) override;
  void Attention(int layer, Activation qkv, Activation out) override;
  void AddRmsNorm(Activation x, Activation delta, WeightId weight, Activation out) override;
  void SiluMul(Activation gate_up, int groups) override;
  void Add(Activation x, Activation delta) override;
  void GatherRmsNorm(Activation in, WeightId weight, Activation out) override;
  void Logits(Activation in, WeightId matrix, float* logits) override;
  void AllReduce(Activation x) override;
  void ProjectKv(int layer, Activation in, WeightId kv_matrix) override;
  void NarrowStep(const StepRows& rows, std::span<const int64_t> kept, Activation x) override;
  // RoPE's cos and sin at every row's position (Embed, NarrowStep).
  void RopeAngles();
  void SequenceToHeads(Activation qkv_rows, Activation qkv_heads) override;
  void HeadsToSequence(Activation attn_heads, Activation attn_rows) override;
  // SP mode: the rows SP-group rank j holds of the step's all_rows_
  // (contiguous blocks in rank order).
  int64_t RowBegin(int j) const { return all_rows_ * j / layout_.sequence; }
  bool sp_step() const { return step_mode_ == ParallelMode::kSequence && layout_.sequence > 1; }
  void Check(const absl::Status& s) {
    if (!s.ok() && step_status_.ok()) step_status_ = s;
  }

  ModelConfig config_;
  ModelConfig local_;  // config_ with this rank's heads, KV heads and TP-mode intermediate size
  RankLayout layout_;
  Communicator* world_ = nullptr;     // every rank
  Communicator* sp_group_ = nullptr;  // SP group (S > 1)
  Communicator* tp_group_ = nullptr;  // TP group (T > 1)
  ParallelMode mode_ = ParallelMode::kTensor;       // of the next Forward
  ParallelMode step_mode_ = ParallelMode::kTensor;  // of the current one
  absl::Status step_status_;  // a collective's failure during the current Forward
  cpu::ThreadPool pool_;
  std::unique_ptr<LlamaForward> model_;
  TensorView embed_tokens_;
  // A tied embedding is read from the packed lm_head (when this rank holds
  // all of it), not from the checkpoint file: the table is held once.
  WeightId embed_packed_ = kNoWeight;
  std::vector<std::pair<const void*, WeightId>> whole_sources_;  // during Create
  std::vector<cpu::PackedMatrix> matrices_;  // by WeightId
  // Create's weight cache. On a miss Create runs the model's preparation
  // three times: kMeasure records the matrices' shapes (the file's layout),
  // kWrite packs each into a scratch buffer and writes it, and the last pass
  // maps them from the committed file as a hit does.
  enum class PreparePass { kUse, kMeasure, kWrite };
  PreparePass pass_ = PreparePass::kUse;
  std::vector<WeightCacheWriter::Shape> shapes_;  // kMeasure's record
  std::unique_ptr<WeightCacheWriter> cache_writer_;
  uint64_t cache_max_bytes_ = UINT64_MAX;
  std::shared_ptr<void> write_scratch_;  // kWrite's packing buffer, reused
  size_t write_scratch_bytes_ = 0;
  absl::Status write_status_;            // kWrite's first failure
  std::unique_ptr<WeightCacheFile> cache_;  // kUse maps from it when set
  int cached_taken_ = 0;          // matrices taken from cache_ or written so far
  bool cache_mismatch_ = false;   // one of them had another shape
  std::function<void()> release_source_pages_;
  size_t packed_since_release_ = 0;
  WeightCacheReport cache_report_;
  std::vector<std::vector<float>> vectors_;  // by WeightId
  std::vector<float> inv_freq_;
  int q_dim_ = 0, kv_dim_ = 0;  // this rank's heads (attention, KV cache)
  std::vector<float> qkv_heads_, attn_heads_, a2a_send_, a2a_recv_, final_local_, logits_slice_;
  std::vector<int64_t> send_counts_, recv_counts_;
  std::vector<int64_t> sp_logit_rows_;  // this rank's logits rows (local indices)
  std::vector<float> kv_rows_;          // ProjectKv's [k | v] rows

  int num_blocks_ = 0, block_size_ = 0;
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  // [layer][K|V][num_blocks][kv_heads][block_size][head_dim] of kv_dtype_
  cpu::KvDtype kv_dtype_ = cpu::KvDtype::kF32;
  std::vector<float> kv_scales_;  // as CpuBackendOptions::kv_scales
  std::unique_ptr<char, FreeDeleter> kv_cache_;
  // Faults kv_cache_'s pages in after AllocateKvCache returns.
  std::thread kv_prefault_;
  std::atomic<bool> kv_prefault_stop_{false};
  void StopKvPrefault();

  // The step (BeginStep) and its activations, grown on demand and reused.
  std::span<const int32_t> tokens_, positions_;
  std::span<const int64_t> logit_rows_;
  int64_t rows_ = 0, max_context_ = 0;  // rows_: this rank's rows of the step
  int64_t row0_ = 0, all_rows_ = 0;        // its first row, and the step's rows
  int groups_ = 1;                          // heads / MLP groups in a kQkv, kAttn, kGateUp row
  std::vector<float> x_, xn_, qkv_, attn_, gate_up_, cos_, sin_, scratch_, final_rows_;
  cpu::MatmulScratch matmul_scratch_;
  std::vector<cpu::AttentionSeq> seqs_;
  std::vector<int32_t> tree_path_begin_, tree_paths_;  // cpu::AppendTreePaths of the step's trees
  int64_t hidden_rows_ = 0;  // rows of final_rows_ the last Forward filled
};

}  // namespace floe
