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

}  // namespace floe
