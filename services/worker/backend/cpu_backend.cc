#include "services/worker/backend/cpu_backend.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope.h"
#include "services/worker/backend/backend_common.h"

namespace floe {
namespace {

using cpu::PackedMatrix;

// Part of every weight cache key: a change to the packed layout misses.
std::string PackFormat() {
  return absl::StrCat("cpu panels v1, width ", cpu::kPanelWidth, ", group ", cpu::kPanelGroup);
}

std::vector<float> ToF32(const TensorView& t) {
  std::vector<float> out(t.numel());
  WidenToF32(t.dtype, t.data, 0, t.numel(), out.data());  // vectors are never quantized (LlamaForward checks)
  return out;
}

}  // namespace

CpuBackend::CpuBackend(const ModelConfig& config, int num_threads)
    : config_(config), local_(config), pool_(num_threads) {}

CpuBackend::~CpuBackend() { StopKvPrefault(); }

void CpuBackend::StopKvPrefault() {
  kv_prefault_stop_ = true;
  if (kv_prefault_.joinable()) kv_prefault_.join();
  kv_prefault_stop_ = false;
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const ModelConfig& config,
                                                               const ModelWeights& weights,
                                                               const CpuBackendOptions& options) {
  int threads = options.num_threads > 0 ? options.num_threads
                                        : static_cast<int>(std::thread::hardware_concurrency());
  std::unique_ptr<CpuBackend> backend(new CpuBackend(config, std::max(1, threads)));
  Communicator* world = options.communicator;
  const int rank = world ? world->rank() : 0;
  const int size = world ? world->size() : 1;
  const int sequence = world ? options.sequence_parallel_size : 1;
  if (sequence < 1 || size % sequence != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallel size ", sequence, " does not divide the worker's ", size, " ranks"));
  FLOE_ASSIGN_OR_RETURN(backend->layout_, ShiftRankLayout(config, rank, size / sequence, sequence));
  const RankLayout& l = backend->layout_;
  backend->world_ = world;
  backend->sp_group_ = sequence == size ? world : options.sequence_group;
  backend->tp_group_ = sequence == 1 ? world : options.tensor_group;
  if ((l.sequence > 1 && !backend->sp_group_) || (l.tensor > 1 && !backend->tp_group_))
    return absl::InvalidArgumentError(absl::StrCat("a grid of ", l.tensor, " x ", l.sequence,
                                                   " ranks needs its SP and TP group communicators"));
  if (backend->sp_group_ && (backend->sp_group_->size() != l.sequence || backend->sp_group_->rank() != l.sp_rank()))
    return absl::InvalidArgumentError("the SP group communicator does not match the rank's place in the grid");
  if (backend->tp_group_ && (backend->tp_group_->size() != l.tensor || backend->tp_group_->rank() != l.tp_rank()))
    return absl::InvalidArgumentError("the TP group communicator does not match the rank's place in the grid");
  backend->local_.num_heads = l.heads.num_heads();
  backend->local_.num_kv_heads = l.heads.num_kv_heads();
  backend->local_.intermediate_size = l.heads.intermediate();
  backend->q_dim_ = l.heads.num_heads() * config.head_dim;
  backend->kv_dim_ = l.heads.num_kv_heads() * config.head_dim;
  backend->release_source_pages_ = options.release_source_pages;
  backend->kv_dtype_ = options.kv_dtype;
  if (options.kv_dtype == cpu::KvDtype::kFp8E4m3 && !options.kv_scales.empty()) {
    if (options.kv_scales.size() != 2 * static_cast<size_t>(config.num_layers)) {
      return absl::InvalidArgumentError(absl::StrCat("kv_scales holds ", options.kv_scales.size(),
                                                     " scales, expected 2 per layer (", 2 * config.num_layers, ")"));
    }
    backend->kv_scales_ = options.kv_scales;
  }
  backend->cache_max_bytes_ = options.weight_cache_max_bytes;
  std::string cache_key;
  WeightCacheReport& report = backend->cache_report_;
  if (!options.weight_cache_dir.empty() && !options.weights_fingerprint.empty()) {
    cache_key = absl::StrCat(PackFormat(), "\n", options.weights_fingerprint, "\nrank ", rank, " of ", l.tensor,
                             " x ", l.sequence, "\n");
    report.path = (std::filesystem::path(options.weight_cache_dir) / WeightCacheFile::FileName(cache_key)).string();
    auto opened = WeightCacheFile::Open(report.path, cache_key);
    if (!opened.ok()) {
      report.detail = absl::IsNotFound(opened.status()) ? "absent" : std::string(opened.status().message());
      absl::Status written = backend->WriteWeightCache(config, weights, report.path, cache_key);
      if (written.ok()) opened = WeightCacheFile::Open(report.path, cache_key);
      if (!written.ok() || !opened.ok()) {
        report.outcome = WeightCacheReport::Outcome::kFailed;
        report.detail = std::string((written.ok() ? opened.status() : written).message());
      }
    }
    if (opened.ok()) backend->cache_ = std::move(opened).value();
  }
  // The model checks the config and every weight, then prepares the shard
  // this rank holds here (PrepareMatrix maps what the cache file holds).
  FLOE_ASSIGN_OR_RETURN(backend->model_, LlamaForward::Create(config, weights, *backend, &l));
  if (backend->release_source_pages_) backend->release_source_pages_();
  backend->whole_sources_.clear();
  backend->whole_sources_.shrink_to_fit();
  if (backend->cache_) {
    const bool whole = !backend->cache_mismatch_ && backend->cached_taken_ == backend->cache_->size();
    if (!whole) {
      report.outcome = WeightCacheReport::Outcome::kFailed;
      report.detail = "its entries do not match the model's matrices; repacked those";
    } else if (report.outcome == WeightCacheReport::Outcome::kOff) {
      report.outcome = report.detail.empty() ? WeightCacheReport::Outcome::kHit : WeightCacheReport::Outcome::kWritten;
    }
    backend->cache_.reset();  // the views keep the mapping
  }
  backend->inv_freq_ = cpu::RopeInvFreq(RopeParamsOf(config));
  return backend;
}

absl::Status CpuBackend::WriteWeightCache(const ModelConfig& config, const ModelWeights& weights,
                                          const std::string& path, const std::string& key) {
  // Each pass leaves placeholders (and copied vectors) behind: cleared after.
  auto run = [&](PreparePass pass) {
    pass_ = pass;
    absl::Status status = LlamaForward::Create(config, weights, *this, &layout_).status();
    pass_ = PreparePass::kUse;
    matrices_.clear();
    vectors_.clear();
    return status;
  };
  shapes_.clear();
  FLOE_RETURN_IF_ERROR(run(PreparePass::kMeasure));
  FLOE_ASSIGN_OR_RETURN(cache_writer_, WeightCacheWriter::Create(path, key, shapes_, cache_max_bytes_));
  cache_report_.evicted = cache_writer_->evicted();
  cached_taken_ = 0;
  write_status_ = absl::OkStatus();
  absl::Status status = run(PreparePass::kWrite);
  if (status.ok()) status = write_status_;
  if (status.ok() && cached_taken_ != cache_writer_->size())
    status = absl::InternalError("the model's matrices changed between two passes");
  if (status.ok()) status = cache_writer_->Commit();
  cache_writer_.reset();
  write_scratch_.reset();
  write_scratch_bytes_ = 0;
  cached_taken_ = 0;
  return status;
}

WeightId CpuBackend::PrepareMatrix(std::span<const TensorView> parts) {
  const DType dtype = parts.empty() ? DType::kF32 : parts[0].dtype;
  const int64_t k = parts.empty() ? 0 : parts[0].cols();
  int64_t n = 0;
  for (const TensorView& part : parts) n += part.rows();
  std::optional<PackedMatrix> matrix;
  if (pass_ == PreparePass::kMeasure) {
    shapes_.push_back({dtype, n, k});
    matrix = PackedMatrix();  // a placeholder: this pass only records
  } else if (pass_ == PreparePass::kWrite) {
    // Packed into one reused buffer (huge pages), then written: the weights'
    // only lasting copy is the file's page cache.
    const size_t bytes = PackedMatrix::PackedBytes(dtype, n, k);
    if (bytes > write_scratch_bytes_) {
      constexpr size_t kHuge = size_t{2} << 20;
      const size_t alloc = (bytes + kHuge - 1) / kHuge * kHuge;
      write_scratch_.reset(std::aligned_alloc(kHuge, alloc), &std::free);
      if (!write_scratch_) throw std::bad_alloc();
      madvise(write_scratch_.get(), alloc, MADV_HUGEPAGE);
      write_scratch_bytes_ = alloc;
    }
    const PackedMatrix packed = cpu::PackMatrixInto(parts, pool_, write_scratch_.get(), nullptr);
    if (absl::Status s = cache_writer_->Write(cached_taken_++, packed); !s.ok() && write_status_.ok())
      write_status_ = s;
    matrix = PackedMatrix();
  } else if (cache_) {
    matrix = cache_->Matrix(cached_taken_++, dtype, n, k);
    if (!matrix) cache_mismatch_ = true;
  }
  if (!matrix) matrix = cpu::PackMatrix(parts, pool_);
  if (pass_ == PreparePass::kWrite || (pass_ == PreparePass::kUse && !cache_))
    packed_since_release_ += PackedMatrix::PackedBytes(dtype, n, k);
  if (release_source_pages_ && packed_since_release_ >= (size_t{256} << 20)) {
    release_source_pages_();
    packed_since_release_ = 0;
  }
  matrices_.push_back(*std::move(matrix));
  if (pass_ == PreparePass::kUse && parts.size() == 1) whole_sources_.emplace_back(parts[0].data, matrices_.size() - 1);
  return static_cast<WeightId>(matrices_.size() - 1);
}

void CpuBackend::PrepareEmbedding(const TensorView& table) {
  embed_tokens_ = table;
  embed_packed_ = kNoWeight;
  if (pass_ != PreparePass::kUse || (table.dtype != DType::kBF16 && table.dtype != DType::kF32)) return;
  for (const auto& [source, id] : whole_sources_) {
    const PackedMatrix& m = matrices_[id];
    if (source == table.data && m.n() == table.rows() && m.k() == table.cols() && m.dtype() == table.dtype)
      embed_packed_ = id;
  }
}

WeightId CpuBackend::SliceMatrix(WeightId matrix, int64_t row_begin, int64_t row_end, int64_t col_begin,
                                 int64_t col_end) {
  if (pass_ != PreparePass::kUse) {  // placeholders: nothing to slice
    matrices_.emplace_back();
    return static_cast<WeightId>(matrices_.size() - 1);
  }
  matrices_.push_back(matrices_[matrix].Slice(row_begin, row_end, col_begin, col_end));
  return static_cast<WeightId>(matrices_.size() - 1);
}

size_t CpuBackend::WeightBytes() const {
  // The embedding counts unless it is read from the packed lm_head (tied):
  // otherwise its rows are read in place from the checkpoint.
  size_t bytes = embed_packed_ != kNoWeight ? 0 : embed_tokens_.bytes();
  for (const cpu::PackedMatrix& m : matrices_) {
    if (!m.is_slice()) bytes += m.bytes();
  }
  for (const std::vector<float>& v : vectors_) bytes += v.size() * sizeof(float);
  return bytes;
}

WeightId CpuBackend::PrepareVector(std::span<const TensorView> parts) {
  std::vector<float> v;
  for (const TensorView& part : parts) {
    std::vector<float> f = ToF32(part);
    v.insert(v.end(), f.begin(), f.end());
  }
  vectors_.push_back(std::move(v));
  return static_cast<WeightId>(vectors_.size() - 1);
}

size_t CpuBackend::KvBytesPerBlock(int block_size) const {
  return static_cast<size_t>(config_.num_layers) * 2 * block_size * kv_dim_ * cpu::KvElementBytes(kv_dtype_);
}

absl::Status CpuBackend::AllocateKvCache(int num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllocateKvCache: num_blocks (", num_blocks,
                                                   ") and block_size (", block_size,
                                                   ") must be positive"));
  }
  StopKvPrefault();
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  // calloc: a large block comes from mmap as untouched zero pages, so the
  // allocation takes no time at start-up.
  const size_t bytes = KvBytesPerBlock(block_size) * num_blocks;
  kv_cache_.reset(static_cast<char*>(std::calloc(bytes, 1)));
  if (!kv_cache_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the KV cache: ", num_blocks, " blocks of ", KvBytesPerBlock(block_size), " bytes"));
  }
  // Then a background thread faults the pages in (MADV_POPULATE_WRITE: the
  // kernel maps zero pages writable and leaves any contents alone, so the
  // engine may write blocks meanwhile), so that requests do not pay the
  // first touch of each block. The thread runs at SCHED_IDLE: on a machine
  // with few cores, faulting a gigabyte in must not take CPU time from the
  // engine and gRPC threads that are already serving. 16 MiB at a time, so
  // the destructor's stop is seen soon.
#ifdef MADV_POPULATE_WRITE
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(kv_cache_.get()) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(kv_cache_.get() + bytes);
  kv_prefault_ = std::thread([this, begin, end] {
    sched_param idle{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);  // best effort
    constexpr uintptr_t kChunk = uintptr_t{16} << 20;
    for (uintptr_t at = begin; at < end && !kv_prefault_stop_; at += kChunk) {
      if (madvise(reinterpret_cast<void*>(at), std::min(kChunk, end - at), MADV_POPULATE_WRITE) != 0) break;
    }
  });
#endif
  return absl::OkStatus();
}

cpu::KvLayer CpuBackend::LayerKv(int layer) {
  const size_t layer_bytes = KvBytesPerBlock(block_size_) * num_blocks_ / config_.num_layers;
  cpu::KvLayer kv;
  char* k = kv_cache_.get() + layer * layer_bytes;
  kv.k = k;
  kv.v = k + layer_bytes / 2;
  kv.dtype = kv_dtype_;
  if (!kv_scales_.empty()) {
    kv.k_scale = kv_scales_[2 * layer];
    kv.v_scale = kv_scales_[2 * layer + 1];
  }
  kv.block_size = block_size_;
  kv.kv_heads = local_.num_kv_heads;
  kv.head_dim = config_.head_dim;
  return kv;
}

absl::Status CpuBackend::CopyKvSlots(std::span<const KvSlotCopy> copies) {
  FLOE_RETURN_IF_ERROR(ValidateKvSlotCopies(copies, num_blocks_, block_size_));
  const size_t element = cpu::KvElementBytes(kv_dtype_);
  const size_t head_bytes = config_.head_dim * element;
  for (int li = 0; li < config_.num_layers; ++li) {
    const cpu::KvLayer kv = LayerKv(li);
    char* k = static_cast<char*>(kv.k);
    char* v = static_cast<char*>(kv.v);
    for (const KvSlotCopy& c : copies) {  // in order: a copy may read an earlier one's destination
      for (int h = 0; h < kv.kv_heads; ++h) {
        const int64_t dst = kv.Offset(c.dst_block, h, c.dst_slot) * element;
        const int64_t src = kv.Offset(c.src_block, h, c.src_slot) * element;
        std::memmove(k + dst, k + src, head_bytes);
        std::memmove(v + dst, v + src, head_bytes);
      }
    }
  }
  return absl::OkStatus();
}

template <class Fn>
void CpuBackend::ForRows(int64_t rows, const Fn& fn) {
  const int64_t tasks = std::min<int64_t>(rows, pool_.num_threads() * 4);
  pool_.ParallelFor(tasks, rows * config_.hidden_size * 4, [&](int64_t task, int) {
    for (int64_t r = rows * task / tasks; r < rows * (task + 1) / tasks; ++r) fn(r);
  });
}

absl::Status CpuBackend::Forward(std::span<const ForwardSequence> batch, float* logits) {
  hidden_rows_ = 0;
  if (num_blocks_ == 0) return absl::FailedPreconditionError("Forward before AllocateKvCache");
  FLOE_RETURN_IF_ERROR(ValidateForwardBatch(batch, num_blocks_, block_size_));
  step_status_ = absl::OkStatus();
  model_->Run(batch, logits, mode_);
  // A failed collective (a rank gone or late) fails the step: its outputs are not trusted.
  if (!step_status_.ok()) return step_status_;
  hidden_rows_ = model_->num_logit_rows();
  return absl::OkStatus();
}

float* CpuBackend::Rows(Activation a) {
  switch (a) {
    case Activation::kX: return x_.data();
    case Activation::kXn: return xn_.data();
    case Activation::kQkv: return qkv_.data();
    case Activation::kAttn: return attn_.data();
    case Activation::kGateUp: return gate_up_.data();
    case Activation::kFinal: return final_rows_.data();
    case Activation::kQkvHeads: return sp_step() ? qkv_heads_.data() : qkv_.data();
    case Activation::kAttnHeads: return sp_step() ? attn_heads_.data() : attn_.data();
  }
  return nullptr;
}

int64_t CpuBackend::Width(Activation a) const {
  switch (a) {
    case Activation::kX:
    case Activation::kXn:
    case Activation::kFinal: return config_.hidden_size;
    case Activation::kQkv: return groups_ * (q_dim_ + 2 * kv_dim_);
    case Activation::kAttn: return groups_ * q_dim_;
    case Activation::kQkvHeads: return q_dim_ + 2 * kv_dim_;
    case Activation::kAttnHeads: return q_dim_;
    case Activation::kGateUp: return groups_ * 2 * local_.intermediate_size;
  }
  return 0;
}

void CpuBackend::BeginStep(const StepRows& rows) {
  step_mode_ = rows.mode;
  tokens_ = rows.tokens;
  positions_ = rows.positions;
  logit_rows_ = rows.logit_rows;
  all_rows_ = static_cast<int64_t>(rows.tokens.size());
  // SP mode: this rank's block of the rows, the SP group's heads in a row.
  groups_ = sp_step() ? layout_.sequence : 1;
  row0_ = sp_step() ? RowBegin(layout_.sp_rank()) : 0;
  rows_ = sp_step() ? RowBegin(layout_.sp_rank() + 1) - row0_ : all_rows_;
  max_context_ = rows.max_context;
  seqs_.clear();
  tree_path_begin_.clear();
  tree_paths_.clear();
  int64_t first_row = 0;
  for (const ForwardSequence& seq : rows.batch) {
    cpu::AttentionSeq a;
    a.first_row = first_row;
    a.num_tokens = static_cast<int32_t>(seq.tokens.size());
    a.start_pos = seq.start_pos;
    a.block_table = seq.block_table.data();
    if (!seq.parents.empty()) cpu::AppendTreePaths(seq.parents, seq.start_pos, tree_path_begin_, tree_paths_);
    seqs_.push_back(a);
    first_row += a.num_tokens;
  }
  // The root paths of every tree token, built once for all layers; pointed
  // to once complete (appending may move them).
  for (size_t s = 0, next = 0; s < rows.batch.size(); ++s) {
    if (rows.batch[s].parents.empty()) continue;
    seqs_[s].tree_path_begin = tree_path_begin_.data() + next;
    seqs_[s].tree_paths = tree_paths_.data();
    next += rows.batch[s].parents.size() + 1;
  }
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(size);
  };
  const int64_t m = rows_, h = config_.hidden_size;
  grow(x_, m * h);
  grow(xn_, m * h);
  grow(qkv_, m * Width(Activation::kQkv));
  grow(attn_, m * Width(Activation::kAttn));
  if (sp_step()) {
    grow(qkv_heads_, all_rows_ * Width(Activation::kQkvHeads));
    grow(attn_heads_, all_rows_ * q_dim_);
  }
  grow(gate_up_, m * Width(Activation::kGateUp));
  grow(cos_, all_rows_ * config_.head_dim / 2);
  grow(sin_, all_rows_ * config_.head_dim / 2);
  grow(scratch_, static_cast<int64_t>(pool_.num_threads()) * cpu::kAttentionScratchRows * max_context_);
  grow(final_rows_, static_cast<int64_t>(logit_rows_.size()) * h);
}

void CpuBackend::Embed(Activation x) {
  const int64_t h = config_.hidden_size, half = config_.head_dim / 2;
  float* out = Rows(x);
  if (embed_packed_ != kNoWeight) {
    const PackedMatrix& table = matrices_[embed_packed_];
    ForRows(rows_, [&](int64_t r) { table.ReadRow(tokens_[row0_ + r], &out[r * h]); });
  } else {
    ForRows(rows_, [&](int64_t r) { cpu::EmbeddingLookup(embed_tokens_, {&tokens_[row0_ + r], 1}, &out[r * h]); });
  }
  RopeAngles();
}

void CpuBackend::RopeAngles() {
  const int64_t half = config_.head_dim / 2;
  // RoPE runs on the attention's view: every row, this rank's heads.
  ForRows(all_rows_, [&](int64_t r) { cpu::RopeCosSin(inv_freq_, positions_[r], &cos_[r * half], &sin_[r * half]); });
}

void CpuBackend::ProjectKv(int layer, Activation in, WeightId kv_matrix) {
  // TP mode: this rank holds every row (LlamaForward runs SwiftKV steps in TP).
  if (rows_ == 0) return;
  const int64_t hd = config_.head_dim, half = hd / 2, width = 2 * kv_dim_;
  if (static_cast<int64_t>(kv_rows_.size()) < rows_ * width) kv_rows_.resize(rows_ * width);
  cpu::Matmul(Rows(in), rows_, matrices_[kv_matrix], kv_rows_.data(), pool_, Width(in), &matmul_scratch_);
  ForRows(rows_, [&](int64_t r) {
    cpu::ApplyRope(&kv_rows_[r * width], local_.num_kv_heads, hd, &cos_[r * half], &sin_[r * half]);
  });
  cpu::WriteKv(LayerKv(layer), seqs_, kv_rows_.data(), kv_rows_.data() + kv_dim_, width);
}

void CpuBackend::NarrowStep(const StepRows& rows, std::span<const int64_t> kept, Activation x) {
  // Kept rows move down in order (kept[i] >= i), so none is overwritten before it is read.
  const int64_t h = Width(x);
  float* xr = Rows(x);
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i] != static_cast<int64_t>(i)) std::memmove(&xr[i * h], &xr[kept[i] * h], h * sizeof(float));
  }
  BeginStep(rows);  // grows, never shrinks: x's rows stay
  RopeAngles();
}

void CpuBackend::RmsNorm(Activation in, WeightId weight, Activation out) {
  const int64_t h = Width(in), ho = Width(out);
  const float *src = Rows(in), *w = vectors_[weight].data();
  float* dst = Rows(out);
  ForRows(rows_, [&](int64_t r) { cpu::RmsNorm(&src[r * h], w, config_.rms_norm_eps, h, &dst[r * ho]); });
}

void CpuBackend::Matmul(Activation in, WeightId matrix, Activation out) {
  // `in` may be wider than the matrix's input (kGateUp): its row stride is its width.
  if (rows_ == 0) return;  // an SP rank with no rows this step
  cpu::Matmul(Rows(in), rows_, matrices_[matrix], Rows(out), pool_, Width(in), &matmul_scratch_);
}

void CpuBackend::PrepareQk(Activation qkv_heads, WeightId bias, WeightId q_norm, WeightId k_norm) {
  const int64_t hd = config_.head_dim, half = hd / 2, width = Width(qkv_heads);
  const int heads = local_.num_heads, kv_heads = local_.num_kv_heads;
  const float eps = config_.rms_norm_eps;
  float* rows = Rows(qkv_heads);
  const float* b = bias == kNoWeight ? nullptr : vectors_[bias].data();
  const float* qn = q_norm == kNoWeight ? nullptr : vectors_[q_norm].data();
  const float* kn = k_norm == kNoWeight ? nullptr : vectors_[k_norm].data();
  ForRows(all_rows_, [&](int64_t r) {
    float* row = &rows[r * width];
    if (b) cpu::AddInPlace(row, b, width);
    if (qn) {
      for (int hh = 0; hh < heads; ++hh) cpu::RmsNorm(row + hh * hd, qn, eps, hd, row + hh * hd);
    }
    if (kn) {
      for (int hh = 0; hh < kv_heads; ++hh) {
        float* k = row + q_dim_ + hh * hd;
        cpu::RmsNorm(k, kn, eps, hd, k);
      }
    }
    cpu::ApplyRope(row, heads, hd, &cos_[r * half], &sin_[r * half]);
    cpu::ApplyRope(row + q_dim_, kv_heads, hd, &cos_[r * half], &sin_[r * half]);
  });
}

void CpuBackend::WriteKv(int layer, Activation qkv) {
  // Every row of the step, this rank's KV heads.
  const float* rows = Rows(qkv);
  cpu::WriteKv(LayerKv(layer), seqs_, rows + q_dim_, rows + q_dim_ + kv_dim_, Width(qkv));
}

void CpuBackend::Attention(int layer, Activation qkv, Activation out) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.head_dim)));
  cpu::PagedAttention(Rows(qkv), Width(qkv), seqs_, LayerKv(layer), local_.num_heads, scale, Rows(out),
                      Width(out), scratch_.data(), cpu::kAttentionScratchRows * max_context_, pool_);
}

void CpuBackend::AddRmsNorm(Activation x, Activation delta, WeightId weight, Activation out) {
  const int64_t h = config_.hidden_size;
  float *xr = Rows(x), *o = Rows(out);
  const float *d = Rows(delta), *w = vectors_[weight].data();
  ForRows(rows_, [&](int64_t r) {
    cpu::AddInPlace(&xr[r * h], &d[r * h], h);
    cpu::RmsNorm(&xr[r * h], w, config_.rms_norm_eps, h, &o[r * h]);
  });
}

void CpuBackend::SiluMul(Activation gate_up, int groups) {
  const int64_t width = Width(gate_up), inter = width / (2 * groups);
  float* rows = Rows(gate_up);
  // Group g's result lands at g * inter, at or before its gate (2g * inter):
  // in order, no group overwrites one not yet read.
  ForRows(rows_, [&](int64_t r) {
    float* row = &rows[r * width];
    for (int g = 0; g < groups; ++g) cpu::SiluMul(row + 2 * g * inter, row + (2 * g + 1) * inter, inter, row + g * inter);
  });
}

void CpuBackend::Add(Activation x, Activation delta) {
  const int64_t h = config_.hidden_size;
  float* xr = Rows(x);
  const float* d = Rows(delta);
  ForRows(rows_, [&](int64_t r) { cpu::AddInPlace(&xr[r * h], &d[r * h], h); });
}

void CpuBackend::GatherRmsNorm(Activation in, WeightId weight, Activation out) {
  const int64_t h = config_.hidden_size;
  const float *src = Rows(in), *w = vectors_[weight].data();
  float* dst = Rows(out);
  if (!sp_step()) {
    ForRows(static_cast<int64_t>(logit_rows_.size()), [&](int64_t i) {
      cpu::RmsNorm(&src[logit_rows_[i] * h], w, config_.rms_norm_eps, h, &dst[i * h]);
    });
    return;
  }
  // SP mode: each rank norms the logits rows it holds; one all-to-all in
  // the SP group hands every rank all of them, in order (rank blocks are in
  // row order).
  const int sp = layout_.sequence;
  auto count_in = [&](int j) {
    int64_t n = 0;
    for (int64_t r : logit_rows_) n += r >= RowBegin(j) && r < RowBegin(j + 1);
    return n;
  };
  std::vector<int64_t>& mine = sp_logit_rows_;
  mine.clear();
  for (int64_t r : logit_rows_)
    if (r >= row0_ && r < row0_ + rows_) mine.push_back(r - row0_);
  final_local_.resize(mine.size() * h);
  ForRows(static_cast<int64_t>(mine.size()), [&](int64_t i) {
    cpu::RmsNorm(&src[mine[i] * h], w, config_.rms_norm_eps, h, &final_local_[i * h]);
  });
  send_counts_.assign(sp, static_cast<int64_t>(mine.size()) * h);
  recv_counts_.resize(sp);
  for (int j = 0; j < sp; ++j) recv_counts_[j] = count_in(j) * h;
  a2a_send_.clear();
  for (int j = 0; j < sp; ++j) a2a_send_.insert(a2a_send_.end(), final_local_.begin(), final_local_.end());
  Check(sp_group_->AllToAll(a2a_send_, send_counts_, {dst, static_cast<size_t>(logit_rows_.size() * h)},
                            recv_counts_));
}

void CpuBackend::SequenceToHeads(Activation qkv_rows, Activation qkv_heads) {
  if (!sp_step()) return;
  const int sp = layout_.sequence;
  const int64_t width = Width(qkv_rows), block = Width(qkv_heads);
  const float* src = Rows(qkv_rows);
  // To SP rank j: each of my rows' block j (j's heads, [q | k | v]).
  a2a_send_.resize(sp * rows_ * block);
  send_counts_.assign(sp, rows_ * block);
  recv_counts_.resize(sp);
  for (int j = 0; j < sp; ++j) {
    for (int64_t r = 0; r < rows_; ++r)
      std::memcpy(&a2a_send_[(j * rows_ + r) * block], src + r * width + j * block, block * sizeof(float));
    recv_counts_[j] = (RowBegin(j + 1) - RowBegin(j)) * block;
  }
  // From rank i: its rows of my heads, which is every row in order.
  Check(sp_group_->AllToAll(a2a_send_, send_counts_,
                            {Rows(qkv_heads), static_cast<size_t>(all_rows_ * block)}, recv_counts_));
}

void CpuBackend::HeadsToSequence(Activation attn_heads, Activation attn_rows) {
  if (!sp_step()) return;
  const int sp = layout_.sequence;
  const int64_t block = Width(attn_heads), width = Width(attn_rows);
  // To SP rank j: its rows of my heads (a contiguous block of kAttnHeads).
  send_counts_.resize(sp);
  recv_counts_.assign(sp, rows_ * block);
  for (int j = 0; j < sp; ++j) send_counts_[j] = (RowBegin(j + 1) - RowBegin(j)) * block;
  a2a_recv_.resize(sp * rows_ * block);
  Check(sp_group_->AllToAll({Rows(attn_heads), static_cast<size_t>(all_rows_ * block)}, send_counts_, a2a_recv_,
                            recv_counts_));
  // From rank i: my rows of its heads, placed at its heads' columns.
  float* dst = Rows(attn_rows);
  for (int i = 0; i < sp; ++i) {
    for (int64_t r = 0; r < rows_; ++r)
      std::memcpy(dst + r * width + i * block, &a2a_recv_[(i * rows_ + r) * block], block * sizeof(float));
  }
}

void CpuBackend::AllReduce(Activation x) {
  Communicator* group = step_mode_ == ParallelMode::kSequence && layout_.sequence > 1 ? tp_group_ : world_;
  if (!group || rows_ == 0) return;
  Check(group->AllReduceSum({Rows(x), static_cast<size_t>(rows_ * Width(x))}));
}

void CpuBackend::Logits(Activation in, WeightId matrix, float* logits) {
  const int64_t rows = static_cast<int64_t>(logit_rows_.size());
  if (!world_) {
    if (logits) cpu::Matmul(Rows(in), rows, matrices_[matrix], logits, pool_, -1, &matmul_scratch_);
    return;
  }
  // Vocab-parallel: this rank's slice of every row, gathered on rank 0 (an
  // all-to-all that sends only to rank 0) and interleaved into whole rows.
  const int world = layout_.world(), vocab = config_.vocab_size;
  auto slice_begin = [&](int r) { return static_cast<int64_t>(vocab) * r / world; };
  const int64_t mine = layout_.vocab_end - layout_.vocab_begin;
  logits_slice_.resize(rows * mine);
  cpu::Matmul(Rows(in), rows, matrices_[matrix], logits_slice_.data(), pool_, -1, &matmul_scratch_);
  const bool root = layout_.rank == 0;
  send_counts_.assign(world, 0);
  send_counts_[0] = rows * mine;
  recv_counts_.assign(world, 0);
  if (root) {
    for (int r = 0; r < world; ++r) recv_counts_[r] = rows * (slice_begin(r + 1) - slice_begin(r));
  }
  a2a_recv_.resize(root ? rows * vocab : 0);
  Check(world_->AllToAll(logits_slice_, send_counts_, a2a_recv_, recv_counts_));
  if (!root || !logits) return;
  const float* from = a2a_recv_.data();
  for (int r = 0; r < world; ++r) {
    const int64_t v0 = slice_begin(r), width = slice_begin(r + 1) - v0;
    for (int64_t i = 0; i < rows; ++i, from += width)
      std::memcpy(logits + i * vocab + v0, from, width * sizeof(float));
  }
}

std::span<const float> CpuBackend::LastHiddenStates() const {
  return {final_rows_.data(), static_cast<size_t>(hidden_rows_ * config_.hidden_size)};
}

}  // namespace floe
