#include "services/worker/model/llama_forward.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace floe {
namespace {

absl::Status CheckTensor(const TensorView& t, absl::string_view name, std::vector<int64_t> shape, bool matrix) {
  if (!t.present()) return absl::InvalidArgumentError(absl::StrCat("weight ", name, " is missing"));
  if (t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", name, " has shape ", ShapeToString(t.shape),
                                                   ", expected ", ShapeToString(shape)));
  }
  if (matrix && t.dtype == DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", name, " is f16; matrices must be bf16 or f32"));
  }
  if (!matrix && IsQuantized(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", name, " is ", DTypeName(t.dtype),
                                                   "; only linear layers may be quantized"));
  }
  if (IsQuantized(t.dtype) && t.row_scale == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", name, " is ", DTypeName(t.dtype), " without a scale"));
  }
  return absl::OkStatus();
}

struct Linear {
  const TensorView* weight;
  const char* name;
  std::vector<int64_t> shape;
};
// Linears packed into one matrix.
using LinearGroup = std::vector<Linear>;

absl::Status CheckLinearGroup(const LinearGroup& group, const std::string& prefix) {
  for (const Linear& linear : group) {
    FLOE_RETURN_IF_ERROR(CheckTensor(*linear.weight, prefix + linear.name, linear.shape, true));
    if (linear.weight->dtype != group.front().weight->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight ", prefix, linear.name, " is ", DTypeName(linear.weight->dtype), " but ", prefix,
          group.front().name, " is ", DTypeName(group.front().weight->dtype),
          "; the Linears fused into one matrix must share a dtype (list all or none of them in ignore)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckConfig(const ModelConfig& config) {
  const int64_t h = config.hidden_size, hd = config.head_dim;
  if (h <= 0 || hd <= 0 || hd % 2 != 0 || config.num_heads <= 0 || config.num_kv_heads <= 0 ||
      config.num_heads % config.num_kv_heads != 0 || config.vocab_size <= 0 || config.intermediate_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: need positive hidden_size, intermediate_size, vocab_size, even head_dim, and "
        "num_heads a multiple of num_kv_heads; got hidden ", h, ", head_dim ", hd, ", heads ",
        config.num_heads, "/", config.num_kv_heads));
  }
  if (config.swiftkv && (config.architecture != Architecture::kLlamaSwiftKV || config.num_key_value_layers < 1 ||
                         config.num_key_value_layers > config.num_layers)) {
    return absl::InvalidArgumentError(absl::StrCat("config: swiftkv needs LlamaSwiftKVForCausalLM and 1 <= "
                                                   "num_key_value_layers <= num_hidden_layers; got ",
                                                   config.num_key_value_layers, " of ", config.num_layers));
  }
  const std::string& rope = config.rope_scaling.type;
  if (!rope.empty() && rope != "default" && rope != "linear" && rope != "llama3") {
    return absl::InvalidArgumentError(absl::StrCat("config: rope_scaling type '", rope, "' is not supported"));
  }
  return absl::OkStatus();
}

absl::Status CheckWeights(const ModelConfig& config, const ModelWeights& weights) {
  if (static_cast<int>(weights.layers.size()) != config.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights: ", weights.layers.size(), " layers, config says ", config.num_layers));
  }
  const int64_t h = config.hidden_size, hd = config.head_dim;
  const int64_t q_dim = config.num_heads * hd, kv_dim = config.num_kv_heads * hd;
  const int64_t inter = config.intermediate_size, vocab = config.vocab_size;
  FLOE_RETURN_IF_ERROR(CheckTensor(weights.embed_tokens, "embed_tokens", {vocab, h}, false));
  FLOE_RETURN_IF_ERROR(CheckTensor(weights.final_norm, "norm", {h}, false));
  FLOE_RETURN_IF_ERROR(CheckTensor(weights.lm_head, "lm_head", {vocab, h}, true));
  for (int i = 0; i < config.num_layers; ++i) {
    const LayerWeights& l = weights.layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    FLOE_RETURN_IF_ERROR(CheckTensor(l.input_norm, p + "input_layernorm", {h}, false));
    FLOE_RETURN_IF_ERROR(CheckTensor(l.post_attention_norm, p + "post_attention_layernorm", {h}, false));
    // Each Linear may have its own dtype (a quantized checkpoint's `ignore`
    // leaves some dense), but the ones packed into one matrix must agree,
    // as vLLM requires of its fused q|k|v and gate|up.
    const std::vector<LinearGroup> groups = {
        {{&l.q_proj, "self_attn.q_proj", {q_dim, h}},
         {&l.k_proj, "self_attn.k_proj", {kv_dim, h}},
         {&l.v_proj, "self_attn.v_proj", {kv_dim, h}}},
        {{&l.o_proj, "self_attn.o_proj", {h, q_dim}}},
        {{&l.gate_proj, "mlp.gate_proj", {inter, h}}, {&l.up_proj, "mlp.up_proj", {inter, h}}},
        {{&l.down_proj, "mlp.down_proj", {h, inter}}}};
    for (const LinearGroup& group : groups) FLOE_RETURN_IF_ERROR(CheckLinearGroup(group, p));
    if (config.attention_bias) {
      FLOE_RETURN_IF_ERROR(CheckTensor(l.q_bias, p + "self_attn.q_proj.bias", {q_dim}, false));
      FLOE_RETURN_IF_ERROR(CheckTensor(l.k_bias, p + "self_attn.k_proj.bias", {kv_dim}, false));
      FLOE_RETURN_IF_ERROR(CheckTensor(l.v_bias, p + "self_attn.v_proj.bias", {kv_dim}, false));
    }
    if (config.qk_norm) {
      FLOE_RETURN_IF_ERROR(CheckTensor(l.q_norm, p + "self_attn.q_norm", {hd}, false));
      FLOE_RETURN_IF_ERROR(CheckTensor(l.k_norm, p + "self_attn.k_norm", {hd}, false));
    }
    if (i >= config.dense_layers()) {  // q|k|v packed together, and k|v again
      FLOE_RETURN_IF_ERROR(CheckLinearGroup({{&l.q_proj_swiftkv, "self_attn.q_proj_swiftkv", {q_dim, h}},
                                             {&l.k_proj_swiftkv, "self_attn.k_proj_swiftkv", {kv_dim, h}},
                                             {&l.v_proj_swiftkv, "self_attn.v_proj_swiftkv", {kv_dim, h}}},
                                            p));
    }
  }
  if (config.dense_layers() < config.num_layers) {
    FLOE_RETURN_IF_ERROR(CheckTensor(weights.norm_swiftkv, "norm_swiftkv", {h}, false));
  }
  return absl::OkStatus();
}

// Rows [begin, end) of a matrix or elements of a vector: a view, no copy.
TensorView RowSlice(const TensorView& t, int64_t begin, int64_t end) {
  if (begin == 0 && end == t.rows()) return t;
  TensorView v = t;
  v.shape[0] = end - begin;
  v.data = static_cast<const char*>(t.data) + begin * t.cols() * DTypeSize(t.dtype);
  if (t.row_scale) v.row_scale = t.row_scale + begin;
  return v;
}

// Columns [begin, end) of a matrix, copied into `storage` (the ops copy it
// again when they prepare it, so the copy lives only that long).
TensorView ColumnSlice(const TensorView& t, int64_t begin, int64_t end, std::vector<char>& storage) {
  if (begin == 0 && end == t.cols()) return t;
  const size_t elem = DTypeSize(t.dtype), width = (end - begin) * elem;
  storage.resize(t.rows() * width);
  for (int64_t r = 0; r < t.rows(); ++r) {
    std::memcpy(storage.data() + r * width, static_cast<const char*>(t.data) + (r * t.cols() + begin) * elem, width);
  }
  TensorView v = t;
  v.shape = {t.rows(), end - begin};
  v.data = storage.data();
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaForward>> LlamaForward::Create(const ModelConfig& config,
                                                                   const ModelWeights& weights, ModelOps& ops,
                                                                   const RankLayout* layout) {
  FLOE_RETURN_IF_ERROR(CheckConfig(config));
  FLOE_RETURN_IF_ERROR(CheckWeights(config, weights));
  RankLayout one;
  if (!layout) {
    FLOE_ASSIGN_OR_RETURN(one, ShiftRankLayout(config, 0, 1, 1));
    layout = &one;
  }
  std::unique_ptr<LlamaForward> forward(new LlamaForward(config, ops, *layout));
  const int64_t hd = config.head_dim, h = config.hidden_size;
  const std::vector<ParallelLayout>& group = layout->group;
  const ParallelLayout& mine = layout->heads;
  // Held: the SP group's heads, as [q | k | v] per rank of the group, and
  // its MLP rows, as [gate | up] per rank; o_proj and down_proj the
  // matching columns, in order. The TP mode's shard is this rank's group
  // entry: a slice of each.
  const int64_t q_first = group.front().q_head_begin * hd, q_last = group.back().q_head_end * hd;
  const int64_t i_first = group.front().inter_begin, i_last = group.back().inter_end;
  int64_t qkv_begin = 0;  // this rank's q|k|v rows in the group's
  for (int s = 0; s < layout->sp_rank(); ++s)
    qkv_begin += (group[s].num_heads() + 2 * group[s].num_kv_heads()) * hd;
  const int64_t qkv_width = (mine.num_heads() + 2 * mine.num_kv_heads()) * hd;
  const bool sliced = layout->sequence > 1;
  std::vector<char> o_storage, down_storage;
  std::vector<TensorView> parts;
  for (int li = 0; li < config.num_layers; ++li) {
    const LayerWeights& l = weights.layers[li];
    // A SwiftKV layer's rows take their queries from q_proj_swiftkv; its k
    // and v rows of the matrix are computed but never stored (the cache
    // holds ProjectKv's), which keeps the [q | k | v] layout every op reads.
    const bool swiftkv = li >= config.dense_layers();
    const TensorView& q_proj = swiftkv ? l.q_proj_swiftkv : l.q_proj;
    const TensorView& k_proj = swiftkv ? l.k_proj_swiftkv : l.k_proj;
    const TensorView& v_proj = swiftkv ? l.v_proj_swiftkv : l.v_proj;
    Layer layer;
    layer.input_norm = ops.PrepareVector({&l.input_norm, 1});
    layer.post_norm = ops.PrepareVector({&l.post_attention_norm, 1});
    const int64_t q0 = mine.q_head_begin * hd, q1 = mine.q_head_end * hd;
    const int64_t kv0 = mine.kv_head_begin * hd, kv1 = mine.kv_head_end * hd;
    if (config.attention_bias) {  // applied on this rank's heads (PrepareQk)
      const TensorView qkv_bias[] = {RowSlice(l.q_bias, q0, q1), RowSlice(l.k_bias, kv0, kv1),
                                     RowSlice(l.v_bias, kv0, kv1)};
      layer.qkv_bias = ops.PrepareVector(qkv_bias);
    } else {
      layer.qkv_bias = kNoWeight;
    }
    layer.q_norm = config.qk_norm ? ops.PrepareVector({&l.q_norm, 1}) : kNoWeight;
    layer.k_norm = config.qk_norm ? ops.PrepareVector({&l.k_norm, 1}) : kNoWeight;
    // Column-parallel: the group's heads and rows. Row-parallel: the matching columns.
    parts.clear();
    for (const ParallelLayout& g : group) {
      const int64_t k0 = g.kv_head_begin * hd, k1 = g.kv_head_end * hd;
      parts.push_back(RowSlice(q_proj, g.q_head_begin * hd, g.q_head_end * hd));
      parts.push_back(RowSlice(k_proj, k0, k1));
      parts.push_back(RowSlice(v_proj, k0, k1));
    }
    layer.qkv.sp = ops.PrepareMatrix(parts);
    if (swiftkv) {  // the TP mode's heads: SwiftKV steps run in TP
      const TensorView kv[] = {RowSlice(k_proj, kv0, kv1), RowSlice(v_proj, kv0, kv1)};
      layer.kv_swiftkv = ops.PrepareMatrix(kv);
    }
    const TensorView o = ColumnSlice(l.o_proj, q_first, q_last, o_storage);
    layer.o.sp = ops.PrepareMatrix({&o, 1});
    parts.clear();
    for (const ParallelLayout& g : group) {
      parts.push_back(RowSlice(l.gate_proj, g.inter_begin, g.inter_end));
      parts.push_back(RowSlice(l.up_proj, g.inter_begin, g.inter_end));
    }
    layer.gate_up.sp = ops.PrepareMatrix(parts);
    const TensorView down = ColumnSlice(l.down_proj, i_first, i_last, down_storage);
    layer.down.sp = ops.PrepareMatrix({&down, 1});
    if (sliced) {
      const int64_t inter = mine.intermediate();
      layer.qkv.tp = ops.SliceMatrix(layer.qkv.sp, qkv_begin, qkv_begin + qkv_width, 0, h);
      layer.o.tp = ops.SliceMatrix(layer.o.sp, 0, h, q0 - q_first, q1 - q_first);
      layer.gate_up.tp = ops.SliceMatrix(layer.gate_up.sp, layout->sp_rank() * 2 * inter,
                                         (layout->sp_rank() + 1) * 2 * inter, 0, h);
      layer.down.tp = ops.SliceMatrix(layer.down.sp, 0, h, mine.inter_begin - i_first, mine.inter_end - i_first);
    } else {
      layer.qkv.tp = layer.qkv.sp;
      layer.o.tp = layer.o.sp;
      layer.gate_up.tp = layer.gate_up.sp;
      layer.down.tp = layer.down.sp;
    }
    forward->layers_.push_back(layer);
  }
  forward->final_norm_ = ops.PrepareVector({&weights.final_norm, 1});
  if (config.dense_layers() < config.num_layers) forward->norm_swiftkv_ = ops.PrepareVector({&weights.norm_swiftkv, 1});
  // Vocab-parallel: this rank's rows of the lm_head (all of them on one rank).
  const TensorView lm_head = RowSlice(weights.lm_head, layout->vocab_begin, layout->vocab_end);
  forward->lm_head_ = ops.PrepareMatrix({&lm_head, 1});
  ops.PrepareEmbedding(weights.embed_tokens);
  return forward;
}

void LlamaForward::Run(std::span<const ForwardSequence> batch, float* logits, ParallelMode mode) {
  tokens_.clear();
  positions_.clear();
  logit_rows_.clear();
  int64_t max_context = 0;
  for (const ForwardSequence& seq : batch) {
    const int64_t first_row = static_cast<int64_t>(tokens_.size());
    const int32_t n = static_cast<int32_t>(seq.tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      tokens_.push_back(seq.tokens[i]);
      // A tree token's position id is its depth past start_pos (parents precede children).
      positions_.push_back(i == 0 || seq.parents.empty() ? seq.start_pos + i
                                                         : positions_[first_row + seq.parents[i]] + 1);
    }
    for (int32_t i = n - seq.num_logits; i < n; ++i) logit_rows_.push_back(first_row + i);
    max_context = std::max<int64_t>(max_context, seq.start_pos + n);
  }
  if (tokens_.empty()) return;
  // With S = 1 the SP mode is the TP mode; SwiftKV steps run in TP.
  const int dense = config_.dense_layers();
  if (layout_.sequence == 1 || dense < config_.num_layers) mode = ParallelMode::kTensor;
  using A = Activation;
  ops_.BeginStep({batch, tokens_, positions_, logit_rows_, max_context, mode});
  ops_.Embed(A::kX);
  for (int li = 0; li < dense; ++li) RunLayer(li, mode, /*write_kv=*/true);
  if (dense < config_.num_layers) {
    // SwiftKV: the later layers' KV for every row from one normed copy of
    // the residual stream, then only the logits rows run those layers.
    ops_.RmsNorm(A::kX, norm_swiftkv_, A::kXn);
    for (int li = dense; li < config_.num_layers; ++li) ops_.ProjectKv(li, A::kXn, layers_[li].kv_swiftkv);
    if (logit_rows_.empty()) return;
    NarrowToLogitRows(batch, max_context);
    for (int li = dense; li < config_.num_layers; ++li) RunLayer(li, mode, /*write_kv=*/false);
  }
  if (logit_rows_.empty()) return;
  ops_.GatherRmsNorm(A::kX, final_norm_, A::kFinal);
  // Every rank its vocabulary slice; rank 0 gathers them into `logits`.
  ops_.Logits(A::kFinal, lm_head_, logits);
}

void LlamaForward::RunLayer(int li, ParallelMode mode, bool write_kv) {
  using A = Activation;
  const bool sp = mode == ParallelMode::kSequence;
  // The ranks holding the same rows, whose partial sums add up.
  const bool reduce = sp ? layout_.tensor > 1 : layout_.world() > 1;
  const int groups = sp ? layout_.sequence : 1;  // [gate | up] groups of the step's gate_up
  const Layer& layer = layers_[li];
  ops_.RmsNorm(A::kX, layer.input_norm, A::kXn);
  ops_.Matmul(A::kXn, layer.qkv.For(mode), A::kQkv);
  ops_.SequenceToHeads(A::kQkv, A::kQkvHeads);
  ops_.PrepareQk(A::kQkvHeads, layer.qkv_bias, layer.q_norm, layer.k_norm);
  if (write_kv) ops_.WriteKv(li, A::kQkvHeads);
  ops_.Attention(li, A::kQkvHeads, A::kAttnHeads);
  ops_.HeadsToSequence(A::kAttnHeads, A::kAttn);
  ops_.Matmul(A::kAttn, layer.o.For(mode), A::kXn);
  if (reduce) ops_.AllReduce(A::kXn);  // the heads' partial sums
  ops_.AddRmsNorm(A::kX, A::kXn, layer.post_norm, A::kXn);
  ops_.Matmul(A::kXn, layer.gate_up.For(mode), A::kGateUp);
  ops_.SiluMul(A::kGateUp, groups);
  ops_.Matmul(A::kGateUp, layer.down.For(mode), A::kXn);
  if (reduce) ops_.AllReduce(A::kXn);  // the MLP rows' partial sums
  ops_.Add(A::kX, A::kXn);
}

void LlamaForward::NarrowToLogitRows(std::span<const ForwardSequence> batch, int64_t max_context) {
  // A sequence keeps its last num_logits tokens, which sit at the end of its
  // rows and attend over the cache (their own KV included). A tree under
  // verification keeps every token, so its parents stay valid.
  tail_batch_.clear();
  tail_tokens_.clear();
  tail_positions_.clear();
  tail_logit_rows_.clear();
  kept_.clear();
  int64_t first_row = 0;
  for (const ForwardSequence& seq : batch) {
    const int32_t n = static_cast<int32_t>(seq.tokens.size());
    if (seq.num_logits > 0) {
      const int32_t skip = seq.parents.empty() ? n - seq.num_logits : 0;
      ForwardSequence tail = seq;
      tail.tokens = seq.tokens.subspan(skip);
      tail.start_pos = seq.start_pos + skip;
      const int64_t tail_first = static_cast<int64_t>(kept_.size());
      for (int32_t i = skip; i < n; ++i) {
        kept_.push_back(first_row + i);
        tail_tokens_.push_back(tokens_[first_row + i]);
        tail_positions_.push_back(positions_[first_row + i]);
      }
      const int64_t tail_rows = n - skip;
      for (int64_t i = tail_rows - seq.num_logits; i < tail_rows; ++i) tail_logit_rows_.push_back(tail_first + i);
      tail_batch_.push_back(tail);
    }
    first_row += n;
  }
  ops_.NarrowStep({tail_batch_, tail_tokens_, tail_positions_, tail_logit_rows_, max_context, ParallelMode::kTensor},
                  kept_, Activation::kX);
}

}  // namespace floe
