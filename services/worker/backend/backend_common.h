// What every backend shares: the checks it runs on what the engine hands it
// before any of it reaches a kernel (a block id outside the pool or a
// malformed tree would read or write memory that is not the sequence's;
// errors name the entry), and the RoPE parameters of a config.
#pragma once

#include <span>

#include "absl/status/status.h"
#include "kernels/cpu/rope.h"
#include "services/worker/model/forward_batch.h"
#include "services/worker/model/model_config.h"

namespace floe {

// Every sequence: tokens, start_pos >= 0, num_logits in [0, tokens], a block
// table covering its positions with ids in [0, num_blocks), and a tree's
// parents (at most cpu::kMaxTreeTokens tokens, each parent before its child).
absl::Status ValidateForwardBatch(std::span<const ForwardSequence> batch, int num_blocks, int block_size);

// Every copy's blocks in [0, num_blocks) and slots in [0, block_size).
absl::Status ValidateKvSlotCopies(std::span<const KvSlotCopy> copies, int num_blocks, int block_size);

// The config's rotary embedding (theta, scaling) for cpu::RopeInvFreq.
cpu::RopeParams RopeParamsOf(const ModelConfig& config);

}  // namespace floe
