#include "services/worker/engine/prefix_chain.h"

#include <span>

namespace floe {

void PrefixChain::AcquireCachedPrefix(Sequence& seq) {
  if (!enabled_) return;
  if (seq.wants_prompt_logprobs()) {  // every prompt row must run for its logits
    seq.registered_blocks = 0;
    seq.last_block_hash = seq.request.cache_salt_hash;
    return;
  }
  std::span<const int32_t> lookup(seq.tokens.data(), seq.tokens.size() - 1);
  seq.block_table = blocks_.AcquireCachedPrefix(lookup, seq.request.cache_salt_hash);
  seq.num_computed = static_cast<int32_t>(seq.block_table.size()) * block_size_;
  seq.registered_blocks = static_cast<int32_t>(seq.block_table.size());
  seq.last_block_hash = seq.request.cache_salt_hash;
  for (int32_t b = 0; b < seq.registered_blocks; ++b) {
    seq.last_block_hash = BlockManager::HashBlock(
        seq.last_block_hash, std::span<const int32_t>(seq.tokens).subspan(b * block_size_, block_size_));
  }
}

bool PrefixChain::EnsureBlocks(Sequence& seq, int32_t num_tokens) {
  const int32_t needed = (seq.num_computed + num_tokens + block_size_ - 1) / block_size_ -
                         static_cast<int32_t>(seq.block_table.size());
  if (needed <= 0) return true;
  auto fresh = blocks_.Allocate(needed);
  if (!fresh) return false;
  seq.block_table.insert(seq.block_table.end(), fresh->begin(), fresh->end());
  return true;
}

void PrefixChain::RegisterFullBlocks(Sequence& seq) {
  if (!enabled_) return;
  while ((seq.registered_blocks + 1) * block_size_ <= seq.num_computed) {
    const int32_t b = seq.registered_blocks;
    seq.last_block_hash = BlockManager::HashBlock(
        seq.last_block_hash, std::span<const int32_t>(seq.tokens).subspan(b * block_size_, block_size_));
    blocks_.RegisterFullBlock(seq.block_table[b], seq.last_block_hash);
    ++seq.registered_blocks;
  }
}

void PrefixChain::Trim(Sequence& seq) {
  const size_t keep = static_cast<size_t>((seq.num_computed + block_size_ - 1) / block_size_);
  if (seq.block_table.size() <= keep) return;
  blocks_.Release(std::span<const int32_t>(seq.block_table).subspan(keep));
  seq.block_table.resize(keep);
}

void PrefixChain::Release(Sequence& seq) {
  blocks_.Release(seq.block_table);
  seq.block_table.clear();
  seq.draft.clear();
  seq.num_computed = 0;
  seq.registered_blocks = 0;
  seq.last_block_hash = seq.request.cache_salt_hash;
}

}  // namespace floe
