#include "services/worker/backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope.h"

namespace floe {
namespace {

using cpu::PackedMatrix;

absl::Status CheckTensor(const TensorView& t, absl::string_view name, std::vector<int64_t> shape,
                         bool matrix) {
  if (!t.present()) return absl::InvalidArgumentError(absl::StrCat("weight ", name, " is missing"));
  if (t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", name, " has shape ",
                                                   ShapeToString(t.shape), ", expected ",
                                                   ShapeToString(shape)));
  }
  if (matrix && t.dtype == DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight ", name, " is f16; the CPU backend takes bf16 or f32 matrices"));
  }
  return absl::OkStatus();
}

std::vector<float> ToF32(const TensorView& t) {
  std::vector<float> out(t.numel());
  const auto* bits = static_cast<const uint16_t*>(t.data);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::kF32: out[i] = static_cast<const float*>(t.data)[i]; break;
      case DType::kBF16: out[i] = Bf16ToF32(bits[i]); break;
      case DType::kF16: out[i] = F16ToF32(bits[i]); break;
    }
  }
  return out;
}

}  // namespace

struct CpuBackend::Layer {
  std::vector<float> input_norm, post_norm, qkv_bias, q_norm, k_norm;
  PackedMatrix qkv, o, gate_up, down;
};

CpuBackend::CpuBackend(const ModelConfig& config, const ModelWeights& weights, int num_threads)
    : config_(config), weights_(weights), pool_(num_threads) {}

CpuBackend::~CpuBackend() = default;

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const ModelConfig& config,
                                                               const ModelWeights& weights,
                                                               const CpuBackendOptions& options) {
  const int64_t h = config.hidden_size, hd = config.head_dim;
  if (h <= 0 || hd <= 0 || hd % 2 != 0 || config.num_heads <= 0 || config.num_kv_heads <= 0 ||
      config.num_heads % config.num_kv_heads != 0 || config.vocab_size <= 0 ||
      config.intermediate_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: need positive hidden_size, intermediate_size, vocab_size, even head_dim, and "
        "num_heads a multiple of num_kv_heads; got hidden ", h, ", head_dim ", hd, ", heads ",
        config.num_heads, "/", config.num_kv_heads));
  }
  const std::string& rope = config.rope_scaling.type;
  if (!rope.empty() && rope != "default" && rope != "linear" && rope != "llama3") {
    return absl::InvalidArgumentError(absl::StrCat("config: rope_scaling type '", rope, "' is not supported"));
  }
  if (static_cast<int>(weights.layers.size()) != config.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("weights: ", weights.layers.size(),
                                                   " layers, config says ", config.num_layers));
  }
  const int64_t q_dim = config.num_heads * hd, kv_dim = config.num_kv_heads * hd;
  const int64_t inter = config.intermediate_size, vocab = config.vocab_size;
  FLOE_RETURN_IF_ERROR(CheckTensor(weights.embed_tokens, "embed_tokens", {vocab, h}, false));
  FLOE_RETURN_IF_ERROR(CheckTensor(weights.final_norm, "norm", {h}, false));
  FLOE_RETURN_IF_ERROR(CheckTensor(weights.lm_head, "lm_head", {vocab, h}, true));
  DType matrix_dtype = weights.lm_head.dtype;
  for (int i = 0; i < config.num_layers; ++i) {
    const LayerWeights& l = weights.layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    FLOE_RETURN_IF_ERROR(CheckTensor(l.input_norm, p + "input_layernorm", {h}, false));
    FLOE_RETURN_IF_ERROR(CheckTensor(l.post_attention_norm, p + "post_attention_layernorm", {h}, false));
    const std::pair<const TensorView*, std::pair<const char*, std::vector<int64_t>>> mats[] = {
        {&l.q_proj, {"self_attn.q_proj", {q_dim, h}}},
        {&l.k_proj, {"self_attn.k_proj", {kv_dim, h}}},
        {&l.v_proj, {"self_attn.v_proj", {kv_dim, h}}},
        {&l.o_proj, {"self_attn.o_proj", {h, q_dim}}},
        {&l.gate_proj, {"mlp.gate_proj", {inter, h}}},
        {&l.up_proj, {"mlp.up_proj", {inter, h}}},
        {&l.down_proj, {"mlp.down_proj", {h, inter}}}};
    for (const auto& [t, spec] : mats) {
      FLOE_RETURN_IF_ERROR(CheckTensor(*t, p + spec.first, spec.second, true));
      if (t->dtype != matrix_dtype) {
        return absl::InvalidArgumentError(absl::StrCat("weight ", p, spec.first, " is ",
                                                       DTypeName(t->dtype), ", lm_head is ",
                                                       DTypeName(matrix_dtype)));
      }
    }
    if (config.attention_bias) {
      FLOE_RETURN_IF_ERROR(CheckTensor(l.q_bias, p + "self_attn.q_proj.bias", {q_dim}, false));
      FLOE_RETURN_IF_ERROR(CheckTensor(l.k_bias, p + "self_attn.k_proj.bias", {kv_dim}, false));
      FLOE_RETURN_IF_ERROR(CheckTensor(l.v_bias, p + "self_attn.v_proj.bias", {kv_dim}, false));
    }
    if (config.qk_norm) {
      FLOE_RETURN_IF_ERROR(CheckTensor(l.q_norm, p + "self_attn.q_norm", {hd}, false));
      FLOE_RETURN_IF_ERROR(CheckTensor(l.k_norm, p + "self_attn.k_norm", {hd}, false));
    }
  }

  int threads = options.num_threads > 0 ? options.num_threads
                                        : static_cast<int>(std::thread::hardware_concurrency());
  std::unique_ptr<CpuBackend> backend(new CpuBackend(config, weights, std::max(1, threads)));
  backend->q_dim_ = static_cast<int>(q_dim);
  backend->kv_dim_ = static_cast<int>(kv_dim);
  cpu::ThreadPool& pool = backend->pool_;
  for (const LayerWeights& l : weights.layers) {
    Layer layer;
    layer.input_norm = ToF32(l.input_norm);
    layer.post_norm = ToF32(l.post_attention_norm);
    if (config.attention_bias) {
      for (const TensorView* b : {&l.q_bias, &l.k_bias, &l.v_bias}) {
        std::vector<float> part = ToF32(*b);
        layer.qkv_bias.insert(layer.qkv_bias.end(), part.begin(), part.end());
      }
    }
    if (config.qk_norm) {
      layer.q_norm = ToF32(l.q_norm);
      layer.k_norm = ToF32(l.k_norm);
    }
    const TensorView qkv[] = {l.q_proj, l.k_proj, l.v_proj};
    layer.qkv = cpu::PackMatrix(qkv, pool);
    layer.o = cpu::PackMatrix({&l.o_proj, 1}, pool);
    const TensorView gate_up[] = {l.gate_proj, l.up_proj};
    layer.gate_up = cpu::PackMatrix(gate_up, pool);
    layer.down = cpu::PackMatrix({&l.down_proj, 1}, pool);
    backend->layers_.push_back(std::move(layer));
  }
  backend->final_norm_ = ToF32(weights.final_norm);
  backend->lm_head_ = cpu::PackMatrix({&weights.lm_head, 1}, pool);
  cpu::RopeParams rope_params;
  rope_params.head_dim = config.head_dim;
  rope_params.theta = config.rope_theta;
  rope_params.scaling_type = config.rope_scaling.type;
  rope_params.factor = config.rope_scaling.factor;
  rope_params.low_freq_factor = config.rope_scaling.low_freq_factor;
  rope_params.high_freq_factor = config.rope_scaling.high_freq_factor;
  rope_params.original_max_position_embeddings = config.rope_scaling.original_max_position_embeddings;
  backend->inv_freq_ = cpu::RopeInvFreq(rope_params);
  return backend;
}

size_t CpuBackend::KvBytesPerBlock(int block_size) const {
  return static_cast<size_t>(config_.num_layers) * 2 * block_size * kv_dim_ * sizeof(float);
}

absl::Status CpuBackend::AllocateKvCache(int num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllocateKvCache: num_blocks (", num_blocks,
                                                   ") and block_size (", block_size,
                                                   ") must be positive"));
  }
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  kv_cache_.assign(KvBytesPerBlock(block_size) / sizeof(float) * num_blocks, 0.0f);
  return absl::OkStatus();
}

absl::Status CpuBackend::ValidateBatch(std::span<const ForwardSequence> batch) const {
  if (num_blocks_ == 0) return absl::FailedPreconditionError("Forward before AllocateKvCache");
  for (size_t s = 0; s < batch.size(); ++s) {
    const ForwardSequence& seq = batch[s];
    const int64_t n = seq.tokens.size();
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: no tokens"));
    if (seq.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: start_pos ", seq.start_pos, " < 0"));
    }
    if (seq.num_logits < 0 || seq.num_logits > n) {
      return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: num_logits ", seq.num_logits,
                                                     " outside [0, ", n, "]"));
    }
    const int64_t end = seq.start_pos + n;
    const int64_t blocks_needed = (end + block_size_ - 1) / block_size_;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: block_table has ",
                                                     seq.block_table.size(), " blocks, positions up to ",
                                                     end, " need ", blocks_needed));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= num_blocks_) {
        return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: block_table[", b, "] = ",
                                                       seq.block_table[b], " outside [0, ",
                                                       num_blocks_, ")"));
      }
    }
    if (!seq.parents.empty()) {
      if (static_cast<int64_t>(seq.parents.size()) != n || n > cpu::kMaxTreeTokens) {
        return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: parents has ", seq.parents.size(),
                                                       " entries for ", n, " tokens (at most ",
                                                       cpu::kMaxTreeTokens, ")"));
      }
      for (int64_t i = 0; i < n; ++i) {
        if (i == 0 ? seq.parents[0] != -1 : seq.parents[i] < 0 || seq.parents[i] >= i) {
          return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: parents[", i, "] = ", seq.parents[i],
                                                         ", must be ", i == 0 ? "-1" : "in [0, index)"));
        }
      }
    }
  }
  return absl::OkStatus();
}

void CpuBackend::EnsureWorkspace(int64_t rows, int64_t logit_rows, int64_t max_context) {
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(size);
  };
  const int64_t h = config_.hidden_size;
  grow(x_, rows * h);
  grow(xn_, rows * h);
  grow(qkv_, rows * (q_dim_ + 2 * kv_dim_));
  grow(attn_, rows * q_dim_);
  grow(gate_up_, rows * 2 * config_.intermediate_size);
  grow(cos_, rows * config_.head_dim / 2);
  grow(sin_, rows * config_.head_dim / 2);
  grow(scratch_, static_cast<int64_t>(pool_.num_threads()) * max_context);
  grow(final_rows_, logit_rows * h);
}

cpu::KvLayer CpuBackend::LayerKv(int layer) {
  const size_t layer_floats = KvBytesPerBlock(block_size_) / sizeof(float) * num_blocks_ / config_.num_layers;
  cpu::KvLayer kv;
  kv.k = kv_cache_.data() + layer * layer_floats;
  kv.v = kv.k + layer_floats / 2;
  kv.block_size = block_size_;
  kv.kv_heads = config_.num_kv_heads;
  kv.head_dim = config_.head_dim;
  return kv;
}

absl::Status CpuBackend::CopyKvSlots(std::span<const KvSlotCopy> copies) {
  for (const KvSlotCopy& c : copies) {
    if (c.src_block < 0 || c.src_block >= num_blocks_ || c.dst_block < 0 || c.dst_block >= num_blocks_ ||
        c.src_slot < 0 || c.src_slot >= block_size_ || c.dst_slot < 0 || c.dst_slot >= block_size_) {
      return absl::InvalidArgumentError(absl::StrCat("CopyKvSlots: (", c.src_block, ", ", c.src_slot, ") -> (",
                                                     c.dst_block, ", ", c.dst_slot, ") outside ", num_blocks_,
                                                     " blocks of ", block_size_, " slots"));
    }
  }
  const size_t head_bytes = config_.head_dim * sizeof(float);
  for (int li = 0; li < config_.num_layers; ++li) {
    const cpu::KvLayer kv = LayerKv(li);
    for (const KvSlotCopy& c : copies) {  // in order: a copy may read an earlier one's destination
      for (int h = 0; h < kv.kv_heads; ++h) {
        std::memmove(kv.k + kv.Offset(c.dst_block, h, c.dst_slot), kv.k + kv.Offset(c.src_block, h, c.src_slot),
                     head_bytes);
        std::memmove(kv.v + kv.Offset(c.dst_block, h, c.dst_slot), kv.v + kv.Offset(c.src_block, h, c.src_slot),
                     head_bytes);
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
  FLOE_RETURN_IF_ERROR(ValidateBatch(batch));
  if (batch.empty()) return absl::OkStatus();
  const int64_t h = config_.hidden_size, hd = config_.head_dim, inter = config_.intermediate_size;
  const int64_t qkv_dim = q_dim_ + 2 * kv_dim_;
  const float eps = config_.rms_norm_eps;

  seqs_.clear();
  tokens_.clear();
  positions_.clear();
  logit_rows_.clear();
  tree_path_begin_.clear();
  tree_paths_.clear();
  int64_t max_context = 0;
  for (const ForwardSequence& seq : batch) {
    cpu::AttentionSeq a;
    a.first_row = static_cast<int64_t>(tokens_.size());
    a.num_tokens = static_cast<int32_t>(seq.tokens.size());
    a.start_pos = seq.start_pos;
    a.block_table = seq.block_table.data();
    if (!seq.parents.empty()) cpu::AppendTreePaths(seq.parents, seq.start_pos, tree_path_begin_, tree_paths_);
    seqs_.push_back(a);
    const size_t first_position = positions_.size();
    for (int32_t i = 0; i < a.num_tokens; ++i) {
      tokens_.push_back(seq.tokens[i]);
      // A tree token's position id is its depth past start_pos (parents precede children).
      positions_.push_back(i == 0 || seq.parents.empty() ? seq.start_pos + i
                                                         : positions_[first_position + seq.parents[i]] + 1);
    }
    for (int32_t i = a.num_tokens - seq.num_logits; i < a.num_tokens; ++i) {
      logit_rows_.push_back(a.first_row + i);
    }
    max_context = std::max<int64_t>(max_context, seq.start_pos + a.num_tokens);
  }
  // The root paths of every tree token, built once for all layers; pointed
  // to once complete (appending may move them).
  for (size_t s = 0, next = 0; s < batch.size(); ++s) {
    if (batch[s].parents.empty()) continue;
    seqs_[s].tree_path_begin = tree_path_begin_.data() + next;
    seqs_[s].tree_paths = tree_paths_.data();
    next += batch[s].parents.size() + 1;
  }
  const int64_t m = static_cast<int64_t>(tokens_.size());
  EnsureWorkspace(m, static_cast<int64_t>(logit_rows_.size()), max_context);

  const int64_t half = hd / 2;
  ForRows(m, [&](int64_t r) {
    cpu::EmbeddingLookup(weights_.embed_tokens, {&tokens_[r], 1}, &x_[r * h]);
    cpu::RopeCosSin(inv_freq_, positions_[r], &cos_[r * half], &sin_[r * half]);
  });

  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  for (int li = 0; li < config_.num_layers; ++li) {
    const Layer& layer = layers_[li];
    ForRows(m, [&](int64_t r) {
      cpu::RmsNorm(&x_[r * h], layer.input_norm.data(), eps, h, &xn_[r * h]);
    });
    Matmul(xn_.data(), m, layer.qkv, qkv_.data());
    ForRows(m, [&](int64_t r) {
      float* row = &qkv_[r * qkv_dim];
      if (!layer.qkv_bias.empty()) cpu::AddInPlace(row, layer.qkv_bias.data(), qkv_dim);
      if (config_.qk_norm) {
        for (int hh = 0; hh < config_.num_heads; ++hh) {
          cpu::RmsNorm(row + hh * hd, layer.q_norm.data(), eps, hd, row + hh * hd);
        }
        for (int hh = 0; hh < config_.num_kv_heads; ++hh) {
          float* k = row + q_dim_ + hh * hd;
          cpu::RmsNorm(k, layer.k_norm.data(), eps, hd, k);
        }
      }
      cpu::ApplyRope(row, config_.num_heads, hd, &cos_[r * half], &sin_[r * half]);
      cpu::ApplyRope(row + q_dim_, config_.num_kv_heads, hd, &cos_[r * half], &sin_[r * half]);
    });
    const cpu::KvLayer kv = LayerKv(li);
    cpu::WriteKv(kv, seqs_, qkv_.data() + q_dim_, qkv_.data() + q_dim_ + kv_dim_, qkv_dim);
    cpu::PagedAttention(qkv_.data(), qkv_dim, seqs_, kv, config_.num_heads, scale, attn_.data(),
                        q_dim_, scratch_.data(), max_context, pool_);
    Matmul(attn_.data(), m, layer.o, xn_.data());
    ForRows(m, [&](int64_t r) {
      cpu::AddInPlace(&x_[r * h], &xn_[r * h], h);
      cpu::RmsNorm(&x_[r * h], layer.post_norm.data(), eps, h, &xn_[r * h]);
    });
    Matmul(xn_.data(), m, layer.gate_up, gate_up_.data());
    ForRows(m, [&](int64_t r) {
      float* row = &gate_up_[r * 2 * inter];
      cpu::SiluMul(row, row + inter, inter, row);
    });
    Matmul(gate_up_.data(), m, layer.down, xn_.data(), /*ldx=*/2 * inter);
    ForRows(m, [&](int64_t r) { cpu::AddInPlace(&x_[r * h], &xn_[r * h], h); });
  }

  const int64_t num_logit_rows = static_cast<int64_t>(logit_rows_.size());
  hidden_rows_ = num_logit_rows;
  if (num_logit_rows == 0) return absl::OkStatus();
  ForRows(num_logit_rows, [&](int64_t i) {
    cpu::RmsNorm(&x_[logit_rows_[i] * h], final_norm_.data(), eps, h, &final_rows_[i * h]);
  });
  Matmul(final_rows_.data(), num_logit_rows, lm_head_, logits);
  return absl::OkStatus();
}

std::span<const float> CpuBackend::LastHiddenStates() const {
  return {final_rows_.data(), static_cast<size_t>(hidden_rows_ * config_.hidden_size)};
}

}  // namespace floe
