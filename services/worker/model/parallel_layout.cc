#include "services/worker/model/parallel_layout.h"

#include "absl/strings/str_cat.h"

namespace floe {

absl::StatusOr<ParallelLayout> TensorParallelLayout(const ModelConfig& config, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside a group of ", size));
  const int heads = config.num_heads, kv = config.num_kv_heads;
  if (heads % size != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallel size ", size, " does not divide the model's ", heads, " attention heads"));
  if (kv % size != 0 && size % kv != 0)
    return absl::InvalidArgumentError(absl::StrCat("tensor parallel size ", size, " and the model's ", kv,
                                                   " KV heads: one must divide the other"));
  if (config.intermediate_size % size != 0)
    return absl::InvalidArgumentError(absl::StrCat("tensor parallel size ", size,
                                                   " does not divide intermediate_size ", config.intermediate_size));
  ParallelLayout l;
  l.rank = rank;
  l.size = size;
  l.q_head_begin = rank * heads / size;
  l.q_head_end = (rank + 1) * heads / size;
  const int group = heads / kv;  // q heads per KV head
  l.kv_head_begin = l.q_head_begin / group;
  l.kv_head_end = (l.q_head_end - 1) / group + 1;
  l.inter_begin = rank * config.intermediate_size / size;
  l.inter_end = (rank + 1) * config.intermediate_size / size;
  return l;
}

absl::StatusOr<RankLayout> ShiftRankLayout(const ModelConfig& config, int rank, int tensor, int sequence) {
  if (tensor < 1 || sequence < 1)
    return absl::InvalidArgumentError(absl::StrCat("tensor parallel size ", tensor, " and sequence parallel size ",
                                                   sequence, " must be at least 1"));
  RankLayout l;
  l.rank = rank;
  l.tensor = tensor;
  l.sequence = sequence;
  auto heads = TensorParallelLayout(config, rank, l.world());
  if (!heads.ok()) return heads.status();
  l.heads = *heads;
  if (sequence > 1) {
    const int64_t inter = config.intermediate_size / l.world();
    if (config.head_dim % 16 != 0 || inter % 16 != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence parallel size ", sequence, " with ", l.world(), " ranks: head_dim ", config.head_dim,
          " and intermediate_size / ranks = ", inter, " must be multiples of 16 (the TP mode's weight slices)"));
  }
  for (int s = 0; s < sequence; ++s) l.group.push_back(*TensorParallelLayout(config, l.tp_rank() * sequence + s, l.world()));
  l.vocab_begin = static_cast<int64_t>(config.vocab_size) * rank / l.world();
  l.vocab_end = static_cast<int64_t>(config.vocab_size) * (rank + 1) / l.world();
  return l;
}

}  // namespace floe
