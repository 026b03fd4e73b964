// A sequence's KV blocks and their place in the prefix cache. Full blocks
// are chained by hash (each block's hash covers every token before it), so a
// new request finds the longest cached prefix of full blocks, and only blocks
// whose tokens are final (never a rejected draft's slot) are registered.
//
// Not thread-safe: the engine thread only.
#pragma once

#include <cstdint>

#include "services/worker/engine/sequence.h"
#include "services/worker/kv_cache/block_manager.h"

namespace floe {

class PrefixChain {
 public:
  PrefixChain(BlockManager& blocks, bool enable_prefix_caching)
      : blocks_(blocks), block_size_(blocks.block_size()), enabled_(enable_prefix_caching) {}

  // A sequence with no blocks takes the longest cached prefix of full blocks
  // of its tokens (all but the last: its logits start the output) and
  // rebuilds the hash chain over them; num_computed starts after them.
  void AcquireCachedPrefix(Sequence& seq);
  // Blocks for its next `num_tokens` tokens; false (nothing taken) when the
  // pool has too few.
  bool EnsureBlocks(Sequence& seq, int32_t num_tokens);
  // Registers every block that num_computed has filled since the last call.
  void RegisterFullBlocks(Sequence& seq);
  // Gives back the blocks past num_computed (rejected draft slots).
  void Trim(Sequence& seq);
  // Gives back every block (preemption, finish) and forgets the chain.
  void Release(Sequence& seq);

  const BlockManager& blocks() const { return blocks_; }

 private:
  BlockManager& blocks_;
  int32_t block_size_;
  bool enabled_;
};

}  // namespace floe
