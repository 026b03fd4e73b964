#include "services/worker/backend/backend_common.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/attention.h"

namespace floe {

absl::Status ValidateForwardBatch(std::span<const ForwardSequence> batch, int num_blocks, int block_size) {
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
    const int64_t blocks_needed = (end + block_size - 1) / block_size;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: block_table has ",
                                                     seq.block_table.size(), " blocks, positions up to ",
                                                     end, " need ", blocks_needed));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("batch[", s, "]: block_table[", b, "] = ",
                                                       seq.block_table[b], " outside [0, ",
                                                       num_blocks, ")"));
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

absl::Status ValidateKvSlotCopies(std::span<const KvSlotCopy> copies, int num_blocks, int block_size) {
  for (const KvSlotCopy& c : copies) {
    if (c.src_block < 0 || c.src_block >= num_blocks || c.dst_block < 0 || c.dst_block >= num_blocks ||
        c.src_slot < 0 || c.src_slot >= block_size || c.dst_slot < 0 || c.dst_slot >= block_size) {
      return absl::InvalidArgumentError(absl::StrCat("CopyKvSlots: (", c.src_block, ", ", c.src_slot, ") -> (",
                                                     c.dst_block, ", ", c.dst_slot, ") outside ", num_blocks,
                                                     " blocks of ", block_size, " slots"));
    }
  }
  return absl::OkStatus();
}

cpu::RopeParams RopeParamsOf(const ModelConfig& config) {
  cpu::RopeParams rope;
  rope.head_dim = config.head_dim;
  rope.theta = config.rope_theta;
  rope.scaling_type = config.rope_scaling.type;
  rope.factor = config.rope_scaling.factor;
  rope.low_freq_factor = config.rope_scaling.low_freq_factor;
  rope.high_freq_factor = config.rope_scaling.high_freq_factor;
  rope.original_max_position_embeddings = config.rope_scaling.original_max_position_embeddings;
  return rope;
}

}  // namespace floe
