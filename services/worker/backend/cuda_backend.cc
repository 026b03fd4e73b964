#include "services/worker/backend/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log/log.h"
#include "common/status/status_macros.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/model_kernels.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/sampling.h"
#include "services/worker/backend/backend_common.h"
#include "services/worker/model/llama_forward.h"
#include "services/worker/model/model_ops.h"
#include "services/worker/model/parallel_layout.h"
#include "services/worker/parallel/communicator.h"

namespace floe {
namespace {

std::string ErrorText(cudaError_t e) { return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"); }
std::string Gib(double bytes) { return absl::StrFormat("%.2f GiB", bytes / (1 << 30)); }

// Device memory, freed with its owner. Growing waits for the device first:
// kernels already queued may still read the old allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    Reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    return *this;
  }
  ~DeviceBuffer() { Reset(); }
  // At least `bytes` (contents not kept when it grows).
  cudaError_t Reserve(size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    if (ptr_) cudaDeviceSynchronize();
    Reset();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: the next launch must not report it
      return e;
    }
    ptr_ = p;
    bytes_ = bytes;
    return cudaSuccess;
  }
  void Reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory: the step plan's copies run asynchronously.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  cudaError_t Reserve(size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    const cudaError_t e = cudaMallocHost(&ptr_, std::max<size_t>(bytes, 1 << 16));
    if (e == cudaSuccess) bytes_ = std::max<size_t>(bytes, 1 << 16);
    return e;
  }
  char* data() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A matrix in device memory: row r at data + r * ld elements.
struct DeviceMatrix {
  const void* data = nullptr;
  cuda::Dtype dtype = cuda::Dtype::kF32;
  int64_t rows = 0, cols = 0, ld = 0;
};

size_t ElementBytes(cuda::Dtype d) { return d == cuda::Dtype::kBf16 ? 2 : 4; }

// The largest power of two (up to 256) dividing the address: cuBLASLt picks
// kernels by the operands' alignment.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// y[m, n] = x[m, k] W^T through cuBLASLt, W [n, k] row-major; f32 or (for
// a bf16 W) bf16 output, f32 accumulation. Plans (descriptors and the heuristic's algorithm) are
// cached per shape and alignment, at most kMaxPlans.
class GemmRunner {
 public:
  ~GemmRunner() {
    Clear();
    if (handle_) cublasLtDestroy(handle_);
  }
  absl::Status Init() {
    if (cublasStatus_t s = cublasLtCreate(&handle_); s != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cublasLtCreate: ", cublasLtGetStatusString(s)));
    }
    if (cudaError_t e = workspace_.Reserve(kWorkspaceBytes); e != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("cuBLASLt workspace (32 MiB): ", ErrorText(e)));
    }
    return absl::OkStatus();
  }
  // `x` holds W's dtype, row r at x + r * x_ld elements; y is [m, W.rows]
  // of y_dtype (bf16: rounded to nearest even from the f32 sums).
  std::string Run(const void* x, int64_t x_ld, int64_t m, const DeviceMatrix& w, void* y, cuda::Dtype y_dtype,
                  cudaStream_t stream) {
    if (m == 0) return "";
    if (y_dtype == cuda::Dtype::kBf16 && w.dtype != cuda::Dtype::kBf16) return "a bf16 output needs bf16 weights";
    const Key key{m,    w.rows, w.cols, w.ld, x_ld, static_cast<int>(w.dtype), static_cast<int>(y_dtype),
                  Alignment(w.data), Alignment(x), Alignment(y)};
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      if (plans_.size() >= kMaxPlans) Clear();
      Plan plan;
      if (std::string error = MakePlan(key, plan); !error.empty()) return error;
      it = plans_.emplace(key, plan).first;
    }
    const Plan& p = it->second;
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t s = cublasLtMatmul(handle_, p.op, &alpha, w.data, p.a, x, p.b, &beta, y, p.c, y, p.c,
                                            &p.algo, workspace_.as<void>(), workspace_.bytes(), stream);
    return s == CUBLAS_STATUS_SUCCESS ? "" : absl::StrCat("cublasLtMatmul: ", cublasLtGetStatusString(s));
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  static constexpr size_t kMaxPlans = 4096;
  // m, n, k, ld of W, ld of x, dtype, y's dtype, alignments of W, x, y.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, uint32_t, uint32_t, uint32_t>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };

  // Column-major view: y^T [n, m] = W (stored k x n, transposed) * x^T (stored k x m).
  std::string MakePlan(const Key& key, Plan& p) {
    const auto [m, n, k, w_ld, x_ld, dtype, y_dtype, align_w, align_x, align_y] = key;
    const cudaDataType_t type = dtype == static_cast<int>(cuda::Dtype::kBf16) ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType_t out_type = y_dtype == static_cast<int>(cuda::Dtype::kBf16) ? CUDA_R_16BF : CUDA_R_32F;
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    bool ok = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)) ==
                   CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)) ==
                   CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatrixLayoutCreate(&p.a, type, k, n, w_ld) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatrixLayoutCreate(&p.b, type, k, m, x_ld) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatrixLayoutCreate(&p.c, out_type, n, m, n) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreference_t pref = nullptr;
    ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
    const uint64_t workspace = kWorkspaceBytes;
    const uint32_t aligns[] = {align_w, align_x, align_y, align_y};
    const cublasLtMatmulPreferenceAttributes_t align_attrs[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)) == CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 4; ++i) {
      ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(aligns[i])) ==
                     CUBLAS_STATUS_SUCCESS;
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ok = ok && cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found) ==
                   CUBLAS_STATUS_SUCCESS;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!ok || found == 0) {
      Destroy(p);
      return absl::StrCat("cuBLASLt has no algorithm for ", m, " x ", k, " by ", n, " x ", k,
                          dtype == static_cast<int>(cuda::Dtype::kBf16) ? " bf16" : " f32",
                          out_type == CUDA_R_16BF ? ", bf16 out" : "");
    }
    p.algo = result.algo;
    return "";
  }
  static void Destroy(Plan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    p = Plan{};
  }
  void Clear() {
    for (auto& [key, plan] : plans_) Destroy(plan);
    plans_.clear();
  }

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

class CudaBackendImpl final : public CudaBackend, private ModelOps {
 public:
  CudaBackendImpl(const ModelConfig& config, const CudaBackendOptions& options)
      : config_(config), options_(options), device_(options.device), on_fault_(options.on_fault) {}
  ~CudaBackendImpl() override {
    cudaSetDevice(device_);
    for (auto& [key, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  // This rank's place in the grid and its groups, checked as the CPU
  // backend checks them.
  absl::Status SetUpRanks() {
    Communicator* world = options_.communicator;
    const int rank = world ? world->rank() : 0, size = world ? world->size() : 1;
    const int sequence = world ? options_.sequence_parallel_size : 1;
    if (sequence < 1 || size % sequence != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence parallel size ", sequence, " does not divide the worker's ", size, " ranks"));
    }
    FLOE_ASSIGN_OR_RETURN(rank_layout_, ShiftRankLayout(config_, rank, size / sequence, sequence));
    const RankLayout& l = rank_layout_;
    world_ = world;
    sp_group_ = sequence == size ? world : options_.sequence_group;
    tp_group_ = sequence == 1 ? world : options_.tensor_group;
    if ((l.sequence > 1 && !sp_group_) || (l.tensor > 1 && !tp_group_)) {
      return absl::InvalidArgumentError(absl::StrCat("a grid of ", l.tensor, " x ", l.sequence,
                                                     " ranks needs its SP and TP group communicators"));
    }
    if (sp_group_ && (sp_group_->size() != l.sequence || sp_group_->rank() != l.sp_rank())) {
      return absl::InvalidArgumentError("the SP group communicator does not match the rank's place in the grid");
    }
    if (tp_group_ && (tp_group_->size() != l.tensor || tp_group_->rank() != l.tp_rank())) {
      return absl::InvalidArgumentError("the TP group communicator does not match the rank's place in the grid");
    }
    return absl::OkStatus();
  }

  absl::Status Init(const ModelWeights& weights) {
    cudaSetDevice(device_);
    cudaDeviceProp prop{};
    if (cudaError_t e = cudaGetDeviceProperties(&prop, device_); e != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat("CUDA device ", device_, ": ", ErrorText(e)));
    }
    device_name_ = absl::StrCat(prop.name, " (device ", device_, ", ", Gib(static_cast<double>(prop.totalGlobalMem)), ")");
    sm_count_ = std::max(1, prop.multiProcessorCount);
    // A narrow cache's prompt attention runs on tensor cores (bf16 mma); an
    // f32 cache keeps the f32 kernel, the CPU's arithmetic to rounding.
    mma_prefill_ = cuda::PrefillAttentionMmaSupported(options_.kv_dtype, config_.head_dim);
    // The context exists once the stream does: what is free then is this
    // worker's starting point (KvCacheBudget).
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaStreamCreate: ", ErrorText(e)));
    }
    size_t total = 0;
    if (cudaError_t e = cudaMemGetInfo(&free_at_init_, &total); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaMemGetInfo: ", ErrorText(e)));
    }
    FLOE_RETURN_IF_ERROR(gemm_.Init());
    FLOE_RETURN_IF_ERROR(SetUpRanks());
    // Split-K attention's partial results: Splits() keeps a step's (row,
    // head, split) blocks under 4 per SM.
    if (cudaError_t e = attn_workspace_.Reserve(4 * sm_count_ * (config_.head_dim + 2) * sizeof(float));
        e != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("the attention workspace: ", ErrorText(e)));
    }
    const RankLayout& layout = rank_layout_;
    heads_ = layout.heads.num_heads();
    kv_heads_ = layout.heads.num_kv_heads();
    inter_ = layout.heads.intermediate();
    q_dim_ = heads_ * config_.head_dim;
    kv_dim_ = kv_heads_ * config_.head_dim;
    inv_freq_ = cpu::RopeInvFreq(RopeParamsOf(config_));
    FLOE_ASSIGN_OR_RETURN(model_, LlamaForward::Create(config_, weights, *this, &layout));
    if (!prepare_status_.ok()) return prepare_status_;
    whole_sources_.clear();
    // A copy from pageable memory may return before its DMA lands; the
    // step stream (non-blocking) would not wait for it.
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("uploading the weights: ", ErrorText(e)));
    }
    return absl::OkStatus();
  }

  // Backend.
  const ModelConfig& config() const override { return config_; }
  size_t KvBytesPerBlock(int block_size) const override {
    return static_cast<size_t>(config_.num_layers) * 2 * block_size * kv_dim_ * cuda::KvElementBytes(options_.kv_dtype);
  }
  absl::Status AllocateKvCache(int num_blocks, int block_size) override;
  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override;
  std::span<const float> LastHiddenStates() const override {
    return {hidden_.data(), static_cast<size_t>(hidden_rows_ * config_.hidden_size)};
  }
  absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) override;
  void SetParallelMode(ParallelMode mode) override { mode_ = mode; }
  bool SamplesOnDevice() const override { return true; }
  absl::Status SampleLogits(std::span<const RowSampling> rows, int32_t* tokens, float* logits) override;

  // CudaBackend.
  const std::string& device_name() const override { return device_name_; }
  size_t WeightBytes() const override { return weight_bytes_; }
  absl::Status ReserveActivations(int64_t max_rows, int64_t max_logit_rows) override;
  absl::StatusOr<int64_t> KvCacheBudget(double utilization) const override;
  bool healthy() const override { return healthy_; }

 private:
  // ModelOps.
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
  void SequenceToHeads(Activation qkv_rows, Activation qkv_heads) override;
  void HeadsToSequence(Activation attn_heads, Activation attn_rows) override;
  void WriteKv(int layer, Activation qkv) override;
  void Attention(int layer, Activation qkv, Activation out) override;
  void AddRmsNorm(Activation x, Activation delta, WeightId weight, Activation out) override;
  void SiluMul(Activation gate_up, int groups) override;
  void Add(Activation x, Activation delta) override;
  void GatherRmsNorm(Activation in, WeightId weight, Activation out) override;
  void Logits(Activation in, WeightId matrix, float* logits) override;
  void ProjectKv(int layer, Activation in, WeightId kv_matrix) override;
  void NarrowStep(const StepRows& rows, std::span<const int64_t> kept, Activation x) override;
  void AllReduce(Activation x) override;
  // SP mode: the rows SP-group rank j holds of the step's all_rows_
  // (contiguous blocks in rank order).
  int64_t RowBegin(int j) const { return all_rows_ * j / rank_layout_.sequence; }
  bool sp_step() const { return step_mode_ == ParallelMode::kSequence && rank_layout_.sequence > 1; }
  // Split-K attention: where the step's (row, head) blocks cannot fill the
  // GPU twice over and its contexts are long (>= 256 keys a split), each
  // row's keys are split so that about 2 blocks run per SM.
  int AttentionSplits() const { return SplitsFor(static_cast<int64_t>(h_decode_rows_.size()), max_context_); }
  int SplitsFor(int64_t rows, int64_t max_context) const {
    const int64_t blocks = std::max<int64_t>(1, rows * heads_);
    if (blocks >= 2 * sm_count_ || max_context < 512) return 1;
    const int64_t splits = std::min<int64_t>({(2 * sm_count_ + blocks - 1) / blocks, max_context / 256,
                                              cuda::kMaxSplits});
    return static_cast<int>(std::max<int64_t>(1, splits));
  }
  // CUDA graphs of decode steps: the padded batch size of `batch` (0: the
  // step runs eagerly).
  int GraphBatch(std::span<const ForwardSequence> batch) const;
  absl::Status ForwardGraph(std::span<const ForwardSequence> batch, int graph_batch, float* logits);
  // Every device and pinned address a captured graph bakes in.
  using GraphAddressList = std::array<const void*, 13>;
  GraphAddressList GraphAddresses() const;
  // Runs a collective on device memory: the step stream's work first (the
  // communicator runs on its own stream and returns once done there).
  void Collective(const char* op, const std::function<absl::Status()>& call);

  float* Rows(Activation a) const;
  // Splits the step's rows between PrefillAttention and PagedAttention.
  void PlanAttention(std::span<const ForwardSequence> batch);
  // Bytes of the sampling buffers for n drawn rows: parameters, then tokens.
  static size_t SampleBytes(int64_t n) { return n * (sizeof(cuda::SampleParams) + sizeof(int32_t)); }
  // Copies logits rows [row, row + count) of the last step to the host.
  void DownloadLogitsRows(int64_t row, int64_t count, float* logits);
  int64_t Width(Activation a) const;
  cuda::PagedKv LayerKv(int layer) const;
  // y = x W^T over `rows` rows of x (row stride x_ld floats), y of y_dtype
  // (bf16 only for a bf16 W). A bf16 W's input is rounded to bf16 first
  // (into bf16_), unless `in` is the activation whose bf16 rows bf16_ holds
  // already (bf16_holds_).
  void Gemm(const float* x, int64_t x_ld, int64_t rows, const DeviceMatrix& w, void* y,
            cuda::Dtype y_dtype = cuda::Dtype::kF32, std::optional<Activation> in = std::nullopt);
  // After a failure the step's remaining ops do nothing (their inputs are not
  // trusted); Forward reports the first failure.
  // While a graph replays, the model's ops enqueue nothing: the graph holds
  // their kernels (BeginStep still lays out and uploads the step's plan).
  bool Skip() const { return !step_status_.ok() || graph_phase_ == GraphPhase::kReplay; }
  // Records the first failure of the step (and of the device: not healthy).
  void Check(int code, const char* op) {
    if (code != 0) Fail(op, ErrorText(static_cast<cudaError_t>(code)));
  }
  void Fail(const char* op, const std::string& error) {
    if (step_status_.ok()) step_status_ = absl::InternalError(absl::StrCat("CUDA step failed in ", op, ": ", error));
  }
  void Prepared(cudaError_t e, const std::string& what, size_t bytes);

  // A step failed on the device: no later step runs; the owner hears once.
  void Faulted() {
    if (!healthy_) return;
    healthy_ = false;
    if (on_fault_) on_fault_(step_status_);
  }

  ModelConfig config_;
  CudaBackendOptions options_;
  int device_;
  std::function<void(const absl::Status&)> on_fault_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  GemmRunner gemm_;
  std::unique_ptr<LlamaForward> model_;
  RankLayout rank_layout_;
  Communicator* world_ = nullptr;     // every rank (null: one rank)
  Communicator* sp_group_ = nullptr;  // SP group (S > 1)
  Communicator* tp_group_ = nullptr;  // TP group (T > 1)
  ParallelMode mode_ = ParallelMode::kTensor;       // of the next Forward
  ParallelMode step_mode_ = ParallelMode::kTensor;  // of the current one
  int heads_ = 0, kv_heads_ = 0;
  int64_t inter_ = 0, q_dim_ = 0, kv_dim_ = 0;
  std::vector<float> inv_freq_;
  bool healthy_ = true;
  absl::Status step_status_;
  size_t free_at_init_ = 0;                          // device memory free before the weights
  static constexpr double kFreeMargin = 256 << 20;  // left free for the CUDA runtime's own needs

  // Weights.
  std::vector<DeviceBuffer> owned_;
  std::vector<DeviceMatrix> matrices_;           // by WeightId
  std::vector<const float*> vectors_;            // by WeightId
  std::vector<std::pair<TensorView, WeightId>> whole_sources_;  // during Init: a tied embedding
  absl::Status prepare_status_;
  size_t weight_bytes_ = 0;
  const void* embed_ = nullptr;
  cuda::Dtype embed_dtype_ = cuda::Dtype::kF32;

  // KV cache: [layer][K|V][num_blocks][kv_heads][block_size][head_dim] f32.
  DeviceBuffer kv_cache_;
  int num_blocks_ = 0, block_size_ = 0;
  int64_t kv_array_elements_ = 0;  // one layer's K (or V), in options_.kv_dtype

  // The step.
  int64_t rows_ = 0, logit_rows_ = 0;  // rows_: this rank's rows of the step
  int64_t row0_ = 0, all_rows_ = 0;     // its first row, and the step's rows
  int64_t max_context_ = 0;             // the step's longest sequence end
  int sm_count_ = 1;
  bool mma_prefill_ = false;  // prompt attention on tensor cores (PrefillAttentionMma)
  // The MLP's bf16 path (bf16 weights): the gate_up GEMM writes bf16 into
  // gate_up_ (gate_up_bf16_), SiluMul writes the product's bf16 rows into
  // bf16_, and the down GEMM reads them there (bf16_holds_ = kGateUp, of
  // bf16_cols_ columns). Host state of the step being enqueued.
  bool gate_up_bf16_ = false;
  std::optional<Activation> bf16_holds_;
  int64_t bf16_cols_ = 0;
  DeviceBuffer attn_workspace_;  // split-K partial results
  int groups_ = 1;                      // heads / MLP groups in a kQkv, kAttn, kGateUp row
  std::vector<int64_t> h_sp_logit_local_;  // SP: the logits rows this rank holds (local indices)
  std::vector<int64_t> send_counts_, recv_counts_;
  const int64_t* sp_logit_local_dev_ = nullptr;
  std::vector<int32_t> h_tokens_, h_write_pos_, h_table_, h_context_, h_path_begin_, h_path_end_, h_tables_,
      h_paths_, tree_begin_;
  std::vector<int64_t> h_logit_index_;
  // Attention: prompt runs in tiles for PrefillAttention ([first row, rows]
  // each), every other row for PagedAttention.
  std::vector<int32_t> h_prefill_tiles_, h_decode_rows_;
  const int32_t* prefill_tiles_dev_ = nullptr;
  std::vector<float> h_cos_, h_sin_;
  PinnedBuffer plan_host_;
  DeviceBuffer plan_dev_;
  bool plan_in_flight_ = false;  // plan_host_ is being copied (synchronize before rewriting it)
  const int32_t* tokens_dev_ = nullptr;
  const int64_t* logit_index_dev_ = nullptr;
  const float *cos_dev_ = nullptr, *sin_dev_ = nullptr;
  cuda::StepLayout step_layout_;

  // Activations, by Activation, and scratch.
  int64_t reserved_rows_ = 0, reserved_logit_rows_ = 0;
  DeviceBuffer x_, xn_, qkv_, attn_, gate_up_, final_, kv_rows_, bf16_, logits_dev_, copies_dev_;
  DeviceBuffer qkv_heads_, attn_heads_, a2a_send_, a2a_recv_, final_local_;  // several ranks
  // CUDA graphs of decode steps (one token and one logits row per sequence,
  // no tree, one rank, no SwiftKV narrowing), by (padded batch, attention
  // splits, block-table width): the plan's layout is fixed by those, so the
  // graph's kernels read each step's plan where the last one was. A graph
  // is captured again when any buffer it reads has moved (grown).
  struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    GraphAddressList addresses;
  };
  enum class GraphPhase { kOff, kCapture, kReplay };
  static constexpr int kMaxGraphBatch = 256;
  static constexpr size_t kMaxGraphs = 64;
  std::map<std::tuple<int, int, int>, DecodeGraph> graphs_;
  GraphPhase graph_phase_ = GraphPhase::kOff;
  int graph_table_width_ = 0;  // block-table entries per sequence in a graph step's plan
  std::vector<ForwardSequence> padded_;
  const int32_t pad_token_ = 0;
  int32_t pad_block_ = 0;  // the KV cache's spare block: padding rows write there
  const GraphAddressList* replay_addresses_ = nullptr;  // of the graph about to replay
  bool graphs_failed_ = false;  // a capture failed: every step runs eagerly
  // Device sampling: the drawn rows' parameters, then their tokens (pinned
  // on the host, and on the device).
  std::vector<cuda::SampleParams> sample_params_;
  std::vector<int32_t> copies_host_;  // CopyKvSlots' entries, flattened
  PinnedBuffer sample_host_;
  DeviceBuffer sample_dev_;
  int64_t max_matrix_cols_ = 0;
  std::vector<float> hidden_;
  int64_t hidden_rows_ = 0;
};

void CudaBackendImpl::Prepared(cudaError_t e, const std::string& what, size_t bytes) {
  if (e == cudaSuccess) {
    weight_bytes_ += bytes;
    return;
  }
  if (!prepare_status_.ok()) return;
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  prepare_status_ = e == cudaErrorMemoryAllocation
                        ? absl::ResourceExhaustedError(absl::StrCat(
                              "out of device memory uploading the weights: ", what, " needs ", Gib(bytes), " with ",
                              Gib(weight_bytes_), " uploaded, ", Gib(free), " free of ", Gib(total), " on ",
                              device_name_))
                        : absl::InternalError(absl::StrCat("uploading ", what, ": ", ErrorText(e)));
}

WeightId CudaBackendImpl::PrepareMatrix(std::span<const TensorView> parts) {
  const WeightId id = static_cast<WeightId>(matrices_.size());
  matrices_.emplace_back();
  const DType dtype = parts.front().dtype;
  if (dtype != DType::kBF16 && dtype != DType::kF32) {
    if (prepare_status_.ok()) {
      prepare_status_ = absl::UnimplementedError(absl::StrCat(
          "the CUDA backend takes bf16 or f32 matrices; this checkpoint has ", DTypeName(dtype),
          " (quantized checkpoints run on --device cpu)"));
    }
    return id;
  }
  DeviceMatrix& m = matrices_.back();
  m.dtype = dtype == DType::kBF16 ? cuda::Dtype::kBf16 : cuda::Dtype::kF32;
  m.cols = parts.front().cols();
  m.ld = m.cols;
  for (const TensorView& p : parts) m.rows += p.rows();
  const size_t bytes = static_cast<size_t>(m.rows * m.cols) * ElementBytes(m.dtype);
  DeviceBuffer buffer;
  cudaError_t e = buffer.Reserve(bytes);
  size_t offset = 0;
  for (const TensorView& p : parts) {
    if (e != cudaSuccess) break;
    e = cudaMemcpy(buffer.as<char>() + offset, p.data, p.bytes(), cudaMemcpyHostToDevice);
    offset += p.bytes();
  }
  Prepared(e, absl::StrCat("a ", m.rows, " x ", m.cols, " matrix"), bytes);
  m.data = buffer.as<void>();
  owned_.push_back(std::move(buffer));
  max_matrix_cols_ = std::max(max_matrix_cols_, m.cols);
  if (parts.size() == 1) whole_sources_.emplace_back(parts.front(), id);
  return id;
}

WeightId CudaBackendImpl::PrepareVector(std::span<const TensorView> parts) {
  std::vector<float> v;
  for (const TensorView& p : parts) {
    const size_t at = v.size();
    v.resize(at + p.numel());
    if (!WidenToF32(p.dtype, p.data, 0, p.numel(), v.data() + at) && prepare_status_.ok()) {
      prepare_status_ = absl::InvalidArgumentError(absl::StrCat("a ", DTypeName(p.dtype), " norm or bias vector"));
    }
  }
  DeviceBuffer buffer;
  cudaError_t e = buffer.Reserve(std::max<size_t>(v.size(), 1) * sizeof(float));
  if (e == cudaSuccess) e = cudaMemcpy(buffer.as<void>(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
  Prepared(e, "a vector", v.size() * sizeof(float));
  vectors_.push_back(buffer.as<float>());
  owned_.push_back(std::move(buffer));
  return static_cast<WeightId>(vectors_.size() - 1);
}

void CudaBackendImpl::PrepareEmbedding(const TensorView& table) {
  // A tied embedding is the lm_head already on the device: held once.
  for (const auto& [view, id] : whole_sources_) {
    if (view.data == table.data && view.dtype == table.dtype && view.shape == table.shape) {
      embed_ = matrices_[id].data;
      embed_dtype_ = matrices_[id].dtype;
      return;
    }
  }
  std::vector<float> widened;
  const void* source = table.data;
  size_t bytes = table.bytes();
  embed_dtype_ = table.dtype == DType::kBF16 ? cuda::Dtype::kBf16 : cuda::Dtype::kF32;
  if (table.dtype != DType::kBF16 && table.dtype != DType::kF32) {  // f16: widened once
    widened.resize(table.numel());
    WidenToF32(table.dtype, table.data, 0, table.numel(), widened.data());
    source = widened.data();
    bytes = widened.size() * sizeof(float);
  }
  DeviceBuffer buffer;
  cudaError_t e = buffer.Reserve(bytes);
  if (e == cudaSuccess) e = cudaMemcpy(buffer.as<void>(), source, bytes, cudaMemcpyHostToDevice);
  Prepared(e, "the embedding table", bytes);
  embed_ = buffer.as<void>();
  owned_.push_back(std::move(buffer));
}

WeightId CudaBackendImpl::SliceMatrix(WeightId matrix, int64_t row_begin, int64_t row_end, int64_t col_begin,
                                      int64_t col_end) {
  DeviceMatrix slice = matrices_[matrix];
  slice.data = static_cast<const char*>(slice.data) + (row_begin * slice.ld + col_begin) * ElementBytes(slice.dtype);
  slice.rows = row_end - row_begin;
  slice.cols = col_end - col_begin;
  matrices_.push_back(slice);
  return static_cast<WeightId>(matrices_.size() - 1);
}

absl::Status CudaBackendImpl::ReserveActivations(int64_t max_rows, int64_t max_logit_rows) {
  cudaSetDevice(device_);
  const int64_t h = config_.hidden_size, s = rank_layout_.sequence;
  // An SP step's rows hold its group's S heads blocks (a rank holds fewer
  // rows then: sized for the worst of both modes).
  const std::pair<DeviceBuffer*, int64_t> rows[] = {
      {&x_, h}, {&xn_, h}, {&qkv_, s * (q_dim_ + 2 * kv_dim_)}, {&attn_, s * q_dim_}, {&gate_up_, s * 2 * inter_},
      {&kv_rows_, 2 * kv_dim_}, {&qkv_heads_, s > 1 ? q_dim_ + 2 * kv_dim_ : 0}, {&attn_heads_, s > 1 ? q_dim_ : 0},
      {&a2a_send_, s > 1 ? s * (q_dim_ + 2 * kv_dim_) : 0}, {&a2a_recv_, s > 1 ? s * q_dim_ : 0}};
  size_t total = 0;
  cudaError_t e = cudaSuccess;
  for (const auto& [buffer, width] : rows) {
    total += max_rows * width * sizeof(float);
    if (e == cudaSuccess) e = buffer->Reserve(max_rows * width * sizeof(float));
  }
  total += max_rows * max_matrix_cols_ * 2 + max_logit_rows * (h + config_.vocab_size) * sizeof(float);
  if (e == cudaSuccess) e = bf16_.Reserve(max_rows * max_matrix_cols_ * 2);
  if (e == cudaSuccess) e = final_.Reserve(max_logit_rows * h * sizeof(float));
  if (e == cudaSuccess) e = logits_dev_.Reserve(max_logit_rows * config_.vocab_size * sizeof(float));
  if (e == cudaSuccess) e = sample_dev_.Reserve(SampleBytes(max_logit_rows));
  if (e == cudaSuccess) e = sample_host_.Reserve(SampleBytes(max_logit_rows));
  if (world_) {  // the vocabulary slices gathered on rank 0; SP's logits rows all-to-all
    total += max_logit_rows * (config_.vocab_size + (s + 1) * h) * sizeof(float);
    if (e == cudaSuccess) e = a2a_recv_.Reserve(std::max(a2a_recv_.bytes(), max_logit_rows * config_.vocab_size * sizeof(float)));
    if (e == cudaSuccess) e = a2a_send_.Reserve(std::max(a2a_send_.bytes(), max_logit_rows * s * h * sizeof(float)));
    if (e == cudaSuccess) e = final_local_.Reserve(max_logit_rows * h * sizeof(float));
  }
  if (e != cudaSuccess) {
    reserved_rows_ = reserved_logit_rows_ = 0;  // some buffers were freed: grow again next step
    size_t free = 0, device_total = 0;
    cudaMemGetInfo(&free, &device_total);
    return absl::ResourceExhaustedError(absl::StrCat("out of device memory for a step of ", max_rows, " tokens (",
                                                     max_logit_rows, " logits rows): ", Gib(total), " of activations, ",
                                                     Gib(free), " free of ", Gib(device_total), ": ", ErrorText(e)));
  }
  reserved_rows_ = std::max(reserved_rows_, max_rows);
  reserved_logit_rows_ = std::max(reserved_logit_rows_, max_logit_rows);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaBackendImpl::KvCacheBudget(double utilization) const {
  if (!(utilization > 0.0 && utilization <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu-memory-utilization ", utilization, " is outside (0, 1]"));
  }
  cudaSetDevice(device_);
  size_t free = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free, &total); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaMemGetInfo: ", ErrorText(e)));
  }
  // This worker's share, less what it holds already (weights, activations,
  // cuBLASLt's workspace: all allocated since Init measured the free
  // memory), and never more than is free: several workers may share a GPU,
  // each with its own share, as vLLM's instances do.
  const double own = static_cast<double>(free_at_init_) - static_cast<double>(free);
  const double share = utilization * static_cast<double>(total) - own;
  const double budget = std::min(share, static_cast<double>(free) - kFreeMargin);
  if (budget < 1.0 * (1 << 20)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no device memory is left for the KV cache on ", device_name_, ": --gpu-memory-utilization ", utilization,
        " allows this worker ", Gib(utilization * static_cast<double>(total)), ", it holds ", Gib(own),
        " already (weights ", Gib(static_cast<double>(weight_bytes_)), ", the rest activations), and ", Gib(free),
        " are free"));
  }
  return static_cast<int64_t>(budget);
}

absl::Status CudaBackendImpl::AllocateKvCache(int num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllocateKvCache: num_blocks (", num_blocks, ") and block_size (",
                                                   block_size, ") must be positive"));
  }
  cudaSetDevice(device_);
  // One spare block past the engine's: a graph step's padding rows write there.
  const size_t bytes = KvBytesPerBlock(block_size) * (num_blocks + 1);
  for (auto& [key, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
  graphs_.clear();
  kv_cache_.Reset();
  if (cudaError_t e = kv_cache_.Reserve(bytes); e != cudaSuccess) {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the KV cache on ", device_name_, ": ",
                                                     num_blocks, " blocks of ", KvBytesPerBlock(block_size),
                                                     " bytes = ", Gib(bytes), ", ", Gib(free), " free: ",
                                                     ErrorText(e)));
  }
  // On the step stream, and finished before the first step writes a block.
  cudaError_t e = cudaMemsetAsync(kv_cache_.as<void>(), 0, bytes, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("clearing the KV cache: ", ErrorText(e)));
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  pad_block_ = num_blocks;
  kv_array_elements_ = static_cast<int64_t>(num_blocks + 1) * kv_heads_ * block_size * config_.head_dim;
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::Forward(std::span<const ForwardSequence> batch, float* logits) {
  if (!healthy_) {  // step_status_ still holds the fault
    return absl::FailedPreconditionError(absl::StrCat("the CUDA device failed in an earlier step: ",
                                                      step_status_.message()));
  }
  if (num_blocks_ == 0) return absl::FailedPreconditionError("Forward before AllocateKvCache");
  FLOE_RETURN_IF_ERROR(ValidateForwardBatch(batch, num_blocks_, block_size_));
  for (const ForwardSequence& seq : batch) {
    for (int32_t t : seq.tokens) {
      if (t < 0 || t >= config_.vocab_size) {  // an index into the embedding table on the device
        return absl::InvalidArgumentError(absl::StrCat("token id ", t, " outside [0, ", config_.vocab_size, ")"));
      }
    }
  }
  cudaSetDevice(device_);
  cudaGetLastError();  // a failed allocation's error is not this step's
  step_status_ = absl::OkStatus();
  hidden_rows_ = 0;
  if (const int graph_batch = GraphBatch(batch); graph_batch > 0) return ForwardGraph(batch, graph_batch, logits);
  model_->Run(batch, logits, mode_);
  Check(cudaStreamSynchronize(stream_), "the step's synchronize");
  plan_in_flight_ = false;
  if (!step_status_.ok()) {
    // Too little memory for a step larger than any reserved for fails that
    // step's requests only; any other error leaves the context unusable:
    // never serve output from it.
    if (!absl::IsResourceExhausted(step_status_)) Faulted();
    return step_status_;
  }
  hidden_rows_ = model_->num_logit_rows();
  return absl::OkStatus();
}

int CudaBackendImpl::GraphBatch(std::span<const ForwardSequence> batch) const {
  if (!options_.cuda_graphs || graphs_failed_ || world_ || config_.dense_layers() < config_.num_layers) return 0;
  if (batch.empty() || static_cast<int>(batch.size()) > kMaxGraphBatch) return 0;
  for (const ForwardSequence& seq : batch) {
    if (seq.tokens.size() != 1 || seq.num_logits != 1 || !seq.parents.empty()) return 0;
  }
  int padded = 1;
  while (padded < static_cast<int>(batch.size())) padded *= 2;
  // Padding must fit the activations reserved at start (ReserveActivations):
  // growing them for padding rows could fail where the step itself fits.
  if (padded > reserved_rows_ || padded > reserved_logit_rows_) return 0;
  return padded;
}

CudaBackendImpl::GraphAddressList CudaBackendImpl::GraphAddresses() const {
  return {x_.as<void>(),       xn_.as<void>(),         qkv_.as<void>(),      attn_.as<void>(),
          gate_up_.as<void>(), final_.as<void>(),      kv_rows_.as<void>(),  bf16_.as<void>(),
          logits_dev_.as<void>(), plan_dev_.as<void>(), kv_cache_.as<void>(), attn_workspace_.as<void>(),
          reinterpret_cast<const void*>(static_cast<uintptr_t>(plan_dev_.bytes()))};
}

absl::Status CudaBackendImpl::ForwardGraph(std::span<const ForwardSequence> batch, int graph_batch, float* logits) {
  const int64_t n = static_cast<int64_t>(batch.size());
  int64_t max_context = 1, widest = 1;
  for (const ForwardSequence& seq : batch) {
    max_context = std::max<int64_t>(max_context, seq.start_pos + 1);
    widest = std::max<int64_t>(widest, static_cast<int64_t>(seq.block_table.size()));
  }
  int width = 16;
  while (width < widest) width *= 2;
  padded_.assign(batch.begin(), batch.end());
  for (int64_t i = n; i < graph_batch; ++i) {
    padded_.push_back(ForwardSequence{{&pad_token_, 1}, 0, {&pad_block_, 1}, 1});
  }
  graph_table_width_ = width;
  const auto key = std::make_tuple(graph_batch, SplitsFor(graph_batch, max_context), width);
  auto it = graphs_.find(key);
  // Replay where the graph's buffers are where it saw them; a step larger
  // than any before may grow them in BeginStep, so look again after it.
  const bool found = it != graphs_.end();
  replay_addresses_ = found ? &it->second.addresses : nullptr;
  graph_phase_ = found ? GraphPhase::kReplay : GraphPhase::kCapture;
  model_->Run(padded_, nullptr, mode_);
  const GraphPhase phase = graph_phase_;
  graph_phase_ = GraphPhase::kOff;
  replay_addresses_ = nullptr;
  if (phase == GraphPhase::kCapture) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream_, &capturing);
    cudaGraph_t graph = nullptr;
    cudaError_t e = capturing != cudaStreamCaptureStatusNone ? cudaStreamEndCapture(stream_, &graph) : cudaSuccess;
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess && step_status_.ok() && graph) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || !step_status_.ok() || !exec) {
      // Nothing of the step ran (capture records, it does not execute): the
      // step runs eagerly, and so does every later one.
      if (exec) cudaGraphExecDestroy(exec);
      const std::string why = !step_status_.ok() ? std::string(step_status_.message()) : ErrorText(e);
      if (absl::IsResourceExhausted(step_status_)) return step_status_;
      LogEvent(LogLevel::kWarning, "worker", "cuda_graphs_off", {{"device", device_name_}, {"error", why}});
      cudaGetLastError();
      graphs_failed_ = true;
      step_status_ = absl::OkStatus();
      model_->Run(batch, logits, mode_);
      Check(cudaStreamSynchronize(stream_), "the step's synchronize");
      plan_in_flight_ = false;
      if (!step_status_.ok()) {
        if (!absl::IsResourceExhausted(step_status_)) Faulted();
        return step_status_;
      }
      hidden_rows_ = model_->num_logit_rows();
      return absl::OkStatus();
    }
    if (found) {
      cudaGraphExecDestroy(it->second.exec);
      graphs_.erase(it);
    }
    if (graphs_.size() >= kMaxGraphs) {  // bounded: start over
      for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g.exec);
      graphs_.clear();
    }
    it = graphs_.emplace(key, DecodeGraph{exec, GraphAddresses()}).first;
  }
  // The step's kernels: captured (not yet run), or replayed.
  if (!Skip()) Check(cudaGraphLaunch(it->second.exec, stream_), "graph launch");
  if (!Skip()) {
    const int64_t h = config_.hidden_size;
    hidden_.resize(n * h);
    Check(cudaMemcpyAsync(hidden_.data(), final_.as<float>(), hidden_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_),
          "graph step (hidden states)");
    if (logits && !Skip()) {
      Check(cudaMemcpyAsync(logits, logits_dev_.as<float>(), n * config_.vocab_size * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "graph step (logits)");
    }
  }
  Check(cudaStreamSynchronize(stream_), "the step's synchronize");
  plan_in_flight_ = false;
  if (!step_status_.ok()) {
    if (!absl::IsResourceExhausted(step_status_)) Faulted();
    return step_status_;
  }
  hidden_rows_ = n;
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::CopyKvSlots(std::span<const KvSlotCopy> copies) {
  if (!healthy_) return absl::FailedPreconditionError("the CUDA device failed in an earlier step");
  FLOE_RETURN_IF_ERROR(ValidateKvSlotCopies(copies, num_blocks_, block_size_));
  if (copies.empty()) return absl::OkStatus();
  cudaSetDevice(device_);
  cudaGetLastError();
  std::vector<int32_t>& flat = copies_host_;
  flat.clear();
  for (const KvSlotCopy& c : copies) flat.insert(flat.end(), {c.src_block, c.src_slot, c.dst_block, c.dst_slot});
  step_status_ = absl::OkStatus();
  Check(copies_dev_.Reserve(flat.size() * sizeof(int32_t)), "CopyKvSlots (allocate)");
  if (step_status_.ok()) {
    Check(cudaMemcpyAsync(copies_dev_.as<void>(), flat.data(), flat.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                          stream_),
          "CopyKvSlots (upload)");
  }
  if (step_status_.ok()) {
    Check(cuda::CopyKvSlots(kv_cache_.as<void>(), options_.kv_dtype, kv_array_elements_, 2 * config_.num_layers,
                            block_size_, kv_heads_, config_.head_dim, copies_dev_.as<int32_t>(),
                            static_cast<int>(copies.size()), stream_),
          "CopyKvSlots");
  }
  Check(cudaStreamSynchronize(stream_), "CopyKvSlots (synchronize)");
  if (!step_status_.ok()) Faulted();
  return step_status_;
}

float* CudaBackendImpl::Rows(Activation a) const {
  switch (a) {
    case Activation::kX: return x_.as<float>();
    case Activation::kXn: return xn_.as<float>();
    case Activation::kQkv: return qkv_.as<float>();
    case Activation::kAttn: return attn_.as<float>();
    case Activation::kGateUp: return gate_up_.as<float>();
    case Activation::kFinal: return final_.as<float>();
    case Activation::kQkvHeads: return sp_step() ? qkv_heads_.as<float>() : qkv_.as<float>();
    case Activation::kAttnHeads: return sp_step() ? attn_heads_.as<float>() : attn_.as<float>();
  }
  return nullptr;
}

int64_t CudaBackendImpl::Width(Activation a) const {
  switch (a) {
    case Activation::kX:
    case Activation::kXn:
    case Activation::kFinal: return config_.hidden_size;
    case Activation::kQkv: return groups_ * (q_dim_ + 2 * kv_dim_);
    case Activation::kAttn: return groups_ * q_dim_;
    case Activation::kQkvHeads: return q_dim_ + 2 * kv_dim_;
    case Activation::kAttnHeads: return q_dim_;
    case Activation::kGateUp: return groups_ * 2 * inter_;
  }
  return 0;
}

cuda::PagedKv CudaBackendImpl::LayerKv(int layer) const {
  cuda::PagedKv kv;
  const int64_t array_bytes = kv_array_elements_ * cuda::KvElementBytes(options_.kv_dtype);
  kv.k = kv_cache_.as<char>() + 2 * layer * array_bytes;
  kv.v = static_cast<char*>(kv.k) + array_bytes;
  kv.dtype = options_.kv_dtype;
  if (options_.kv_dtype == cuda::KvDtype::kFp8E4m3 && !options_.kv_scales.empty()) {
    kv.k_scale = options_.kv_scales[2 * layer];
    kv.v_scale = options_.kv_scales[2 * layer + 1];
  }
  kv.block_size = block_size_;
  kv.kv_heads = kv_heads_;
  kv.head_dim = config_.head_dim;
  return kv;
}

void CudaBackendImpl::BeginStep(const StepRows& rows) {
  step_layout_ = {};  // until this step's plan is on the device, no op may read the last one's
  if (!step_status_.ok()) return;
  step_mode_ = rows.mode;
  max_context_ = rows.max_context;
  all_rows_ = static_cast<int64_t>(rows.tokens.size());
  logit_rows_ = static_cast<int64_t>(rows.logit_rows.size());
  // SP mode: this rank's block of the rows, the SP group's heads in a row.
  groups_ = sp_step() ? rank_layout_.sequence : 1;
  row0_ = sp_step() ? RowBegin(rank_layout_.sp_rank()) : 0;
  rows_ = sp_step() ? RowBegin(rank_layout_.sp_rank() + 1) - row0_ : all_rows_;
  h_sp_logit_local_.clear();
  if (sp_step()) {
    for (int64_t r : rows.logit_rows) {
      if (r >= row0_ && r < row0_ + rows_) h_sp_logit_local_.push_back(r - row0_);
    }
  }
  if (all_rows_ > reserved_rows_ || logit_rows_ > reserved_logit_rows_) {
    if (absl::Status s = ReserveActivations(std::max(all_rows_, reserved_rows_), std::max(logit_rows_, reserved_logit_rows_));
        !s.ok()) {
      step_status_ = s;  // RESOURCE_EXHAUSTED: this step's requests fail, the device is fine
      return;
    }
  }
  // The attention layout, as cpu::PagedAttention reads it.
  h_tokens_.assign(rows.tokens.begin(), rows.tokens.end());
  h_logit_index_.assign(rows.logit_rows.begin(), rows.logit_rows.end());
  h_write_pos_.clear();
  h_table_.clear();
  h_context_.clear();
  h_path_begin_.clear();
  h_path_end_.clear();
  h_tables_.clear();
  h_paths_.clear();
  for (const ForwardSequence& seq : rows.batch) {
    const int32_t table = static_cast<int32_t>(h_tables_.size());
    h_tables_.insert(h_tables_.end(), seq.block_table.begin(), seq.block_table.end());
    if (graph_phase_ != GraphPhase::kOff) h_tables_.resize(table + graph_table_width_, pad_block_);
    const int32_t n = static_cast<int32_t>(seq.tokens.size());
    tree_begin_.clear();  // indices into all of h_paths_
    if (!seq.parents.empty()) cpu::AppendTreePaths(seq.parents, seq.start_pos, tree_begin_, h_paths_);
    for (int32_t i = 0; i < n; ++i) {
      h_write_pos_.push_back(seq.start_pos + i);
      h_table_.push_back(table);
      if (seq.parents.empty()) {
        h_context_.push_back(seq.start_pos + i + 1);
        h_path_begin_.push_back(0);
        h_path_end_.push_back(0);
      } else {
        h_context_.push_back(seq.start_pos);
        h_path_begin_.push_back(tree_begin_[i]);
        h_path_end_.push_back(tree_begin_[i + 1]);
      }
    }
  }
  PlanAttention(rows.batch);
  const int64_t half = config_.head_dim / 2;
  h_cos_.resize(all_rows_ * half);
  h_sin_.resize(all_rows_ * half);
  for (int64_t r = 0; r < all_rows_; ++r) cpu::RopeCosSin(inv_freq_, rows.positions[r], &h_cos_[r * half], &h_sin_[r * half]);

  // One copy of the whole plan, 256-byte aligned arrays.
  struct Part {
    const void* data;
    size_t bytes;
    size_t offset = 0;
  };
  Part parts[] = {{h_tokens_.data(), h_tokens_.size() * 4},         {h_logit_index_.data(), h_logit_index_.size() * 8},
                  {h_write_pos_.data(), h_write_pos_.size() * 4},   {h_table_.data(), h_table_.size() * 4},
                  {h_context_.data(), h_context_.size() * 4},       {h_path_begin_.data(), h_path_begin_.size() * 4},
                  {h_path_end_.data(), h_path_end_.size() * 4},     {h_tables_.data(), h_tables_.size() * 4},
                  {h_paths_.data(), h_paths_.size() * 4},           {h_cos_.data(), h_cos_.size() * 4},
                  {h_sin_.data(), h_sin_.size() * 4},           {h_sp_logit_local_.data(), h_sp_logit_local_.size() * 8},
                  {h_prefill_tiles_.data(), h_prefill_tiles_.size() * 4}, {h_decode_rows_.data(), h_decode_rows_.size() * 4}};
  size_t total = 0;
  for (Part& p : parts) {
    p.offset = total;
    total += (p.bytes + 255) / 256 * 256 + 256;  // never empty: every pointer is valid
  }
  if (plan_in_flight_) Check(cudaStreamSynchronize(stream_), "BeginStep (synchronize)");  // NarrowStep: reused
  Check(plan_host_.Reserve(total), "BeginStep (pinned plan)");
  Check(plan_dev_.Reserve(total), "BeginStep (device plan)");
  if (!step_status_.ok()) return;
  for (const Part& p : parts) {
    if (p.bytes) std::memcpy(plan_host_.data() + p.offset, p.data, p.bytes);
  }
  Check(cudaMemcpyAsync(plan_dev_.as<void>(), plan_host_.data(), total, cudaMemcpyHostToDevice, stream_),
        "BeginStep (upload)");
  plan_in_flight_ = true;
  char* base = plan_dev_.as<char>();
  auto at = [&](int i) { return base + parts[i].offset; };
  tokens_dev_ = reinterpret_cast<const int32_t*>(at(0));
  logit_index_dev_ = reinterpret_cast<const int64_t*>(at(1));
  step_layout_.rows = static_cast<int>(all_rows_);
  step_layout_.write_pos = reinterpret_cast<const int32_t*>(at(2));
  step_layout_.table = reinterpret_cast<const int32_t*>(at(3));
  step_layout_.context = reinterpret_cast<const int32_t*>(at(4));
  step_layout_.path_begin = reinterpret_cast<const int32_t*>(at(5));
  step_layout_.path_end = reinterpret_cast<const int32_t*>(at(6));
  step_layout_.tables = reinterpret_cast<const int32_t*>(at(7));
  step_layout_.paths = reinterpret_cast<const int32_t*>(at(8));
  cos_dev_ = reinterpret_cast<const float*>(at(9));
  sin_dev_ = reinterpret_cast<const float*>(at(10));
  sp_logit_local_dev_ = reinterpret_cast<const int64_t*>(at(11));
  prefill_tiles_dev_ = reinterpret_cast<const int32_t*>(at(12));
  if (!h_prefill_tiles_.empty()) {
    step_layout_.subset = reinterpret_cast<const int32_t*>(at(13));
    step_layout_.subset_rows = static_cast<int>(h_decode_rows_.size());
  }
  // A replay needs its graph's buffers where they were: this step may have
  // grown them (then the graph is captured again).
  if (graph_phase_ == GraphPhase::kReplay && (!replay_addresses_ || *replay_addresses_ != GraphAddresses())) {
    graph_phase_ = GraphPhase::kCapture;
  }
  // The plan is uploaded; the graph records the step's kernels from here.
  if (graph_phase_ == GraphPhase::kCapture) {
    Check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "BeginStep (graph capture)");
  }
}

void CudaBackendImpl::PlanAttention(std::span<const ForwardSequence> batch) {
  h_prefill_tiles_.clear();
  h_decode_rows_.clear();
  // A run shorter than this attends row by row (the decode kernel's blocks
  // then outnumber the tiles' several-fold anyway).
  constexpr int32_t kMinRun = 16;
  const bool tiled = mma_prefill_ || config_.head_dim <= cuda::kMaxPrefillHeadDim;
  const int32_t tile_rows = mma_prefill_ ? cuda::kMmaPrefillTileRows : cuda::kPrefillTileRows;
  int32_t row = 0;
  for (const ForwardSequence& seq : batch) {
    const int32_t n = static_cast<int32_t>(seq.tokens.size());
    if (tiled && seq.parents.empty() && n >= kMinRun) {
      for (int32_t first = 0; first < n; first += tile_rows) {
        h_prefill_tiles_.push_back(row + first);
        h_prefill_tiles_.push_back(std::min(tile_rows, n - first));
      }
    } else {
      for (int32_t i = 0; i < n; ++i) h_decode_rows_.push_back(row + i);
    }
    row += n;
  }
}

void CudaBackendImpl::Embed(Activation x) {
  if (Skip()) return;
  Check(cuda::EmbedRows(embed_, embed_dtype_, tokens_dev_ + row0_, static_cast<int>(rows_), config_.hidden_size, Rows(x),
                        stream_),
        "Embed");
}

void CudaBackendImpl::RmsNorm(Activation in, WeightId weight, Activation out) {
  if (Skip()) return;
  Check(cuda::RmsNormF32(Rows(in), vectors_[weight], config_.rms_norm_eps, static_cast<int>(rows_),
                         static_cast<int>(Width(in)), Rows(out), stream_),
        "RmsNorm");
}

void CudaBackendImpl::Gemm(const float* x, int64_t x_ld, int64_t rows, const DeviceMatrix& w, void* y,
                           cuda::Dtype y_dtype, std::optional<Activation> in) {
  const bool held = in && bf16_holds_ == in;
  bf16_holds_.reset();  // bf16_ is rewritten below or read for the last time
  if (rows == 0 || Skip()) return;
  const void* input = x;
  int64_t input_ld = x_ld;
  if (held) {
    if (w.dtype != cuda::Dtype::kBf16 || w.cols != bf16_cols_) {
      return Fail("Matmul", absl::StrCat("bf16 input of ", bf16_cols_, " columns for a ", w.cols, "-column matrix"));
    }
    input = bf16_.as<void>();
    input_ld = w.cols;
  } else if (w.dtype == cuda::Dtype::kBf16) {  // the CPU kernels round a bf16 matrix's input the same way
    Check(cuda::F32ToBf16(x, x_ld, static_cast<int>(rows), static_cast<int>(w.cols), bf16_.as<uint16_t>(), stream_),
          "Matmul (input to bf16)");
    if (Skip()) return;
    input = bf16_.as<void>();
    input_ld = w.cols;
  }
  if (std::string error = gemm_.Run(input, input_ld, rows, w, y, y_dtype, stream_); !error.empty())
    Fail("Matmul", error);
}

void CudaBackendImpl::Matmul(Activation in, WeightId matrix, Activation out) {
  const DeviceMatrix& w = matrices_[matrix];
  // With bf16 weights gate_up is written in bf16, as vLLM keeps it: half the
  // bytes written and read back (SiluMul then reads it so).
  if (out == Activation::kGateUp) gate_up_bf16_ = w.dtype == cuda::Dtype::kBf16;
  const bool bf16_out = out == Activation::kGateUp && gate_up_bf16_;
  Gemm(Rows(in), Width(in), rows_, w, Rows(out), bf16_out ? cuda::Dtype::kBf16 : cuda::Dtype::kF32, in);
}

void CudaBackendImpl::PrepareQk(Activation qkv, WeightId bias, WeightId q_norm, WeightId k_norm) {
  if (Skip()) return;
  // The attention's view: every row of the step, this rank's heads.
  Check(cuda::PrepareQk(Rows(qkv), static_cast<int>(all_rows_), heads_, kv_heads_, config_.head_dim,
                        bias == kNoWeight ? nullptr : vectors_[bias], q_norm == kNoWeight ? nullptr : vectors_[q_norm],
                        k_norm == kNoWeight ? nullptr : vectors_[k_norm], config_.rms_norm_eps, cos_dev_, sin_dev_,
                        stream_),
        "PrepareQk");
}

void CudaBackendImpl::WriteKv(int layer, Activation qkv) {
  if (Skip()) return;
  const float* rows = Rows(qkv);
  Check(cuda::WriteKv(LayerKv(layer), step_layout_, rows + q_dim_, rows + q_dim_ + kv_dim_, Width(qkv), stream_),
        "WriteKv");
}

void CudaBackendImpl::Attention(int layer, Activation qkv, Activation out) {
  if (Skip()) return;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.head_dim)));
  if (!h_prefill_tiles_.empty()) {
    const auto prefill = mma_prefill_ ? cuda::PrefillAttentionMma : cuda::PrefillAttention;
    Check(prefill(Rows(qkv), Width(qkv), step_layout_, LayerKv(layer), heads_, scale, Rows(out), Width(out),
                  prefill_tiles_dev_, static_cast<int>(h_prefill_tiles_.size() / 2), stream_),
          mma_prefill_ ? "PrefillAttentionMma" : "PrefillAttention");
    if (h_decode_rows_.empty() || Skip()) return;
  }
  Check(cuda::PagedAttention(Rows(qkv), Width(qkv), step_layout_, LayerKv(layer), heads_, scale, Rows(out), Width(out),
                             AttentionSplits(), attn_workspace_.as<float>(),
                             static_cast<int64_t>(attn_workspace_.bytes() / sizeof(float)), stream_),
        "Attention");
}

void CudaBackendImpl::AddRmsNorm(Activation x, Activation delta, WeightId weight, Activation out) {
  if (Skip()) return;
  Check(cuda::AddRmsNormF32(Rows(x), Rows(delta), vectors_[weight], config_.rms_norm_eps, static_cast<int>(rows_),
                            config_.hidden_size, Rows(out), stream_),
        "AddRmsNorm");
}

void CudaBackendImpl::SiluMul(Activation gate_up, int groups) {
  if (Skip()) return;
  const int64_t inter = Width(gate_up) / (2 * groups);
  if (gate_up == Activation::kGateUp && gate_up_bf16_) {  // bf16 rows of Width(kGateUp), product into bf16_
    Check(cuda::SiluMulBf16(gate_up_.as<uint16_t>(), Width(gate_up), static_cast<int>(rows_), groups,
                            static_cast<int>(inter), bf16_.as<uint16_t>(), stream_),
          "SiluMul");
    bf16_holds_ = Activation::kGateUp;
    bf16_cols_ = groups * inter;
    return;
  }
  Check(cuda::SiluMulF32(Rows(gate_up), static_cast<int>(rows_), groups, static_cast<int>(inter), stream_),
        "SiluMul");
}

void CudaBackendImpl::Add(Activation x, Activation delta) {
  if (Skip()) return;
  Check(cuda::AddF32(Rows(x), Rows(delta), rows_ * config_.hidden_size, stream_), "Add");
}

void CudaBackendImpl::Collective(const char* op, const std::function<absl::Status()>& call) {
  if (Skip()) return;
  Check(cudaStreamSynchronize(stream_), op);
  if (Skip()) return;
  if (absl::Status s = call(); !s.ok()) Fail(op, std::string(s.message()));
}

void CudaBackendImpl::AllReduce(Activation x) {
  Communicator* group = sp_step() ? tp_group_ : world_;
  if (!group || rows_ == 0) return;
  Collective("AllReduce", [&] { return group->AllReduceSum({Rows(x), static_cast<size_t>(rows_ * Width(x))}); });
}

void CudaBackendImpl::SequenceToHeads(Activation qkv_rows, Activation qkv_heads) {
  if (Skip() || !sp_step()) return;
  const int sp = rank_layout_.sequence;
  const int64_t width = Width(qkv_rows), block = Width(qkv_heads);
  const float* src = Rows(qkv_rows);
  float* send = a2a_send_.as<float>();
  // To SP rank j: each of my rows' block j (j's heads, [q | k | v]).
  send_counts_.assign(sp, rows_ * block);
  recv_counts_.resize(sp);
  for (int j = 0; j < sp; ++j) {
    if (rows_ > 0) {
      Check(cudaMemcpy2DAsync(send + j * rows_ * block, block * sizeof(float), src + j * block, width * sizeof(float),
                              block * sizeof(float), rows_, cudaMemcpyDeviceToDevice, stream_),
            "SequenceToHeads (pack)");
    }
    recv_counts_[j] = (RowBegin(j + 1) - RowBegin(j)) * block;
  }
  // From rank i: its rows of my heads, which is every row in order.
  Collective("SequenceToHeads", [&] {
    return sp_group_->AllToAll({send, static_cast<size_t>(sp * rows_ * block)}, send_counts_,
                               {Rows(qkv_heads), static_cast<size_t>(all_rows_ * block)}, recv_counts_);
  });
}

void CudaBackendImpl::HeadsToSequence(Activation attn_heads, Activation attn_rows) {
  if (Skip() || !sp_step()) return;
  const int sp = rank_layout_.sequence;
  const int64_t block = Width(attn_heads), width = Width(attn_rows);
  float* recv = a2a_recv_.as<float>();
  // To SP rank j: its rows of my heads (a contiguous block of kAttnHeads).
  send_counts_.resize(sp);
  recv_counts_.assign(sp, rows_ * block);
  for (int j = 0; j < sp; ++j) send_counts_[j] = (RowBegin(j + 1) - RowBegin(j)) * block;
  Collective("HeadsToSequence", [&] {
    return sp_group_->AllToAll({Rows(attn_heads), static_cast<size_t>(all_rows_ * block)}, send_counts_,
                               {recv, static_cast<size_t>(sp * rows_ * block)}, recv_counts_);
  });
  // From rank i: my rows of its heads, placed at its heads' columns.
  float* dst = Rows(attn_rows);
  for (int i = 0; i < sp && rows_ > 0; ++i) {
    Check(cudaMemcpy2DAsync(dst + i * block, width * sizeof(float), recv + i * rows_ * block, block * sizeof(float),
                            block * sizeof(float), rows_, cudaMemcpyDeviceToDevice, stream_),
          "HeadsToSequence (unpack)");
  }
}

void CudaBackendImpl::GatherRmsNorm(Activation in, WeightId weight, Activation out) {
  if (Skip()) return;
  const int64_t h = config_.hidden_size;
  if (!sp_step()) {
    Check(cuda::GatherRmsNormF32(Rows(in), logit_index_dev_, vectors_[weight], config_.rms_norm_eps,
                                 static_cast<int>(logit_rows_), h, Rows(out), stream_),
          "GatherRmsNorm");
    return;
  }
  // SP mode: each rank norms the logits rows it holds; one all-to-all in
  // the SP group hands every rank all of them, in order (rank blocks are in
  // row order).
  const int sp = rank_layout_.sequence;
  const int64_t mine = static_cast<int64_t>(h_sp_logit_local_.size());
  float* local = final_local_.as<float>();
  Check(cuda::GatherRmsNormF32(Rows(in), sp_logit_local_dev_, vectors_[weight], config_.rms_norm_eps,
                               static_cast<int>(mine), h, local, stream_),
        "GatherRmsNorm");
  float* send = a2a_send_.as<float>();
  for (int j = 0; j < sp && mine > 0; ++j) {
    Check(cudaMemcpyAsync(send + j * mine * h, local, mine * h * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "GatherRmsNorm (pack)");
  }
  send_counts_.assign(sp, mine * h);
  recv_counts_.resize(sp);
  for (int j = 0; j < sp; ++j) {
    int64_t n = 0;
    for (int64_t i = 0; i < logit_rows_; ++i) {
      const int64_t r = h_logit_index_[i];
      n += r >= RowBegin(j) && r < RowBegin(j + 1);
    }
    recv_counts_[j] = n * h;
  }
  Collective("GatherRmsNorm", [&] {
    return sp_group_->AllToAll({send, static_cast<size_t>(sp * mine * h)}, send_counts_,
                               {Rows(out), static_cast<size_t>(logit_rows_ * h)}, recv_counts_);
  });
}

void CudaBackendImpl::DownloadLogitsRows(int64_t row, int64_t count, float* logits) {
  const int64_t vocab = config_.vocab_size;
  Check(cudaMemcpyAsync(logits + row * vocab, logits_dev_.as<float>() + row * vocab, count * vocab * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_),
        "SampleLogits (download)");
}

absl::Status CudaBackendImpl::SampleLogits(std::span<const RowSampling> rows, int32_t* tokens, float* logits) {
  if (!healthy_) return absl::FailedPreconditionError("the CUDA device failed in an earlier step");
  if (static_cast<int64_t>(rows.size()) != hidden_rows_) {
    return absl::InvalidArgumentError(absl::StrCat("SampleLogits got ", rows.size(), " rows; the last step has ",
                                                   hidden_rows_, " logits rows"));
  }
  if (!rows.empty() && (!tokens || !logits)) {
    return absl::InvalidArgumentError("SampleLogits needs a tokens and a logits buffer (declined rows land there)");
  }
  cudaSetDevice(device_);
  cudaGetLastError();
  step_status_ = absl::OkStatus();
  sample_params_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowSampling& r = rows[i];
    if (r.action != RowSampling::Action::kSample) continue;
    sample_params_.push_back({static_cast<int32_t>(i), r.temperature, r.top_k, r.top_p, r.min_p, r.seed,
                              static_cast<uint64_t>(r.position)});
  }
  const int n = static_cast<int>(sample_params_.size());
  int32_t* drawn = nullptr;
  if (n > 0) {
    // Grows only past the largest step reserved (ReserveActivations); too
    // little memory fails this step's requests, not the device.
    cudaError_t e = sample_dev_.Reserve(SampleBytes(n));
    if (e == cudaSuccess) e = sample_host_.Reserve(SampleBytes(n));
    if (e != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("out of memory for the sampling buffers of ", n, " rows: ",
                                                       ErrorText(e)));
    }
    if (!Skip()) {
      const size_t param_bytes = n * sizeof(cuda::SampleParams);
      std::memcpy(sample_host_.data(), sample_params_.data(), param_bytes);
      auto* params_dev = sample_dev_.as<cuda::SampleParams>();
      auto* tokens_dev = reinterpret_cast<int32_t*>(sample_dev_.as<char>() + param_bytes);
      drawn = reinterpret_cast<int32_t*>(sample_host_.data() + param_bytes);
      Check(cudaMemcpyAsync(params_dev, sample_host_.data(), param_bytes, cudaMemcpyHostToDevice, stream_),
            "SampleLogits (upload)");
      if (!Skip()) {
        Check(cuda::SampleRows(logits_dev_.as<float>(), config_.vocab_size, config_.vocab_size, params_dev, n,
                               tokens_dev, stream_),
              "SampleRows");
      }
      if (!Skip()) {
        Check(cudaMemcpyAsync(drawn, tokens_dev, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
              "SampleLogits (tokens)");
      }
    }
  }
  // The rows the host samples, in runs of adjacent rows.
  for (size_t i = 0; i < rows.size() && !Skip();) {
    size_t end = i;
    while (end < rows.size() && rows[end].action == RowSampling::Action::kDownload) ++end;
    if (end > i) DownloadLogitsRows(i, end - i, logits);
    i = end + 1;
  }
  if (!Skip()) Check(cudaStreamSynchronize(stream_), "SampleLogits (synchronize)");
  // Rows the device declined (a truncation wider than its candidate window).
  for (int j = 0; j < n && !Skip(); ++j) {
    tokens[sample_params_[j].row] = drawn[j];
    if (drawn[j] < 0) DownloadLogitsRows(sample_params_[j].row, 1, logits);
  }
  if (!Skip()) Check(cudaStreamSynchronize(stream_), "SampleLogits (synchronize)");
  if (!step_status_.ok()) {
    if (!absl::IsResourceExhausted(step_status_)) Faulted();
    return step_status_;
  }
  return absl::OkStatus();
}

void CudaBackendImpl::Logits(Activation in, WeightId matrix, float* logits) {
  if (Skip()) return;
  const int64_t h = config_.hidden_size, vocab = config_.vocab_size;
  Gemm(Rows(in), h, logit_rows_, matrices_[matrix], logits_dev_.as<float>());
  if (Skip() || graph_phase_ != GraphPhase::kOff) return;  // ForwardGraph downloads after the replay
  // The final hidden states too (model-based speculators read them).
  hidden_.resize(logit_rows_ * h);
  Check(cudaMemcpyAsync(hidden_.data(), Rows(in), hidden_.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "Logits (hidden states)");
  if (!world_) {
    if (logits) {
      Check(cudaMemcpyAsync(logits, logits_dev_.as<float>(), logit_rows_ * vocab * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "Logits (download)");
    }
    return;
  }
  // Vocab-parallel: this rank's slice of every row, gathered on rank 0 (an
  // all-to-all that sends only to rank 0) and interleaved into whole rows.
  const int world = rank_layout_.world();
  auto slice_begin = [&](int r) { return vocab * r / world; };
  const int64_t mine = rank_layout_.vocab_end - rank_layout_.vocab_begin;
  const bool root = rank_layout_.rank == 0;
  send_counts_.assign(world, 0);
  send_counts_[0] = logit_rows_ * mine;
  recv_counts_.assign(world, 0);
  if (root) {
    for (int r = 0; r < world; ++r) recv_counts_[r] = logit_rows_ * (slice_begin(r + 1) - slice_begin(r));
  }
  float* gathered = a2a_recv_.as<float>();
  Collective("Logits", [&] {
    return world_->AllToAll({logits_dev_.as<float>(), static_cast<size_t>(logit_rows_ * mine)}, send_counts_,
                            {gathered, static_cast<size_t>(root ? logit_rows_ * vocab : 0)}, recv_counts_);
  });
  if (!root || Skip()) return;
  // Whole rows on the device (sampled there, or downloaded in one copy).
  float* rows = logits_dev_.as<float>();
  const float* from = gathered;
  for (int r = 0; r < world; ++r) {
    const int64_t v0 = slice_begin(r), width = slice_begin(r + 1) - v0;
    if (width > 0 && logit_rows_ > 0) {
      Check(cudaMemcpy2DAsync(rows + v0, vocab * sizeof(float), from, width * sizeof(float), width * sizeof(float),
                              logit_rows_, cudaMemcpyDeviceToDevice, stream_),
            "Logits (interleave)");
    }
    from += logit_rows_ * width;
  }
  if (logits) {
    Check(cudaMemcpyAsync(logits, rows, logit_rows_ * vocab * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "Logits (download)");
  }
}

void CudaBackendImpl::ProjectKv(int layer, Activation in, WeightId kv_matrix) {
  if (Skip()) return;
  if (rows_ == 0) return;
  float* kv = kv_rows_.as<float>();
  Gemm(Rows(in), Width(in), rows_, matrices_[kv_matrix], kv);
  Check(cuda::ApplyRope(kv, 2 * kv_dim_, static_cast<int>(rows_), kv_heads_, config_.head_dim, cos_dev_, sin_dev_,
                        stream_),
        "ProjectKv (RoPE)");
  Check(cuda::WriteKv(LayerKv(layer), step_layout_, kv, kv + kv_dim_, 2 * kv_dim_, stream_), "ProjectKv (WriteKv)");
}

void CudaBackendImpl::NarrowStep(const StepRows& rows, std::span<const int64_t> kept, Activation x) {
  if (Skip()) return;
  // Kept rows move down in order (kept[i] >= i), each copy queued after the
  // last: none overwrites a row before it is read.
  const int64_t h = Width(x);
  float* xr = Rows(x);
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i] == static_cast<int64_t>(i)) continue;
    Check(cudaMemcpyAsync(xr + i * h, xr + kept[i] * h, h * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "NarrowStep");
  }
  BeginStep(rows);  // grows, never shrinks: x's rows stay
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const ModelConfig& config,
                                                                 const ModelWeights& weights,
                                                                 const CudaBackendOptions& options) {
  const int count = cuda::DeviceCount();
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible (run with --device cpu)");
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", options.device, " does not exist: ", count,
                                                   " visible"));
  }
  if (!options.kv_scales.empty() && options.kv_scales.size() != 2 * static_cast<size_t>(config.num_layers)) {
    return absl::InvalidArgumentError(absl::StrCat("kv_scales holds ", options.kv_scales.size(),
                                                   " scales, expected 2 per layer (", 2 * config.num_layers, ")"));
  }
  auto backend = std::make_unique<CudaBackendImpl>(config, options);
  FLOE_RETURN_IF_ERROR(backend->Init(weights));
  return std::unique_ptr<CudaBackend>(std::move(backend));
}

}  // namespace floe
