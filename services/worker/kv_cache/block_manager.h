// Paged KV-cache accounting: which physical blocks hold which sequence's
// tokens, with reference counts and automatic prefix caching.
//
// A block is a fixed number of token slots (block_size). A full block is
// identified by the hash of every token up to its end (a hash chain), so two
// requests that share a prefix share its blocks. Freed blocks keep their hash
// and stay matchable until a new allocation reuses them (least recently freed
// first), which is what lets an agent's next turn skip recomputing its history.
//
// Not thread-safe: owned by the engine thread. The KV memory itself belongs to
// the Backend; this class only hands out block ids.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace floe {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(ref_counts_.size()); }
  // Blocks that an allocation could use now: unreferenced, cached or not.
  int num_free_blocks() const { return num_free_; }
  // Share of blocks referenced by some sequence, 0..1.
  float Usage() const;

  // Hash of a full block, chained over the previous block's hash.
  static uint64_t HashBlock(uint64_t previous_hash, std::span<const int32_t> tokens);

  // Finds the longest run of cached full blocks that prefix `tokens`, takes a
  // reference on each, and returns their ids (possibly empty). `seed` starts
  // the hash chain: requests with different seeds (cache salts) never share.
  std::vector<int32_t> AcquireCachedPrefix(std::span<const int32_t> tokens, uint64_t seed = 0);

  // Takes `count` fresh blocks, or returns nullopt (and takes none) when too few are free.
  std::optional<std::vector<int32_t>> Allocate(int count);

  // Records that `block` now holds the full block whose chained hash is `hash`,
  // so later requests can share it. A block already registered keeps its hash.
  void RegisterFullBlock(int32_t block, uint64_t hash);

  // Drops one reference on each block; unreferenced blocks become free (their
  // cached content stays matchable until reused). Freed in reverse so a
  // sequence's tail blocks are reused before its head (the head is the likelier shared prefix).
  void Release(std::span<const int32_t> blocks);

  // Drops every cached hash (blocks stay allocated as they are).
  void ResetPrefixCache();

  int ref_count(int32_t block) const { return ref_counts_[block]; }

  // Counters for metrics.
  int64_t prefix_queries_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

  // Verifies free list, ref counts and hash index agree; for tests.
  absl::Status CheckIntegrity() const;

 private:
  static constexpr int32_t kNone = -1;
  void FreeListRemove(int32_t block);
  void FreeListPushBack(int32_t block);
  void Take(int32_t block);

  int block_size_;
  std::vector<int32_t> ref_counts_;
  std::vector<uint64_t> block_hash_;  // valid when has_hash_
  std::vector<uint8_t> has_hash_;
  absl::flat_hash_map<uint64_t, int32_t> cached_blocks_;  // full-block hash -> block
  // Intrusive doubly linked free list, least recently freed at the head.
  std::vector<int32_t> free_prev_, free_next_;
  int32_t free_head_ = kNone, free_tail_ = kNone;
  int num_free_ = 0;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace floe
