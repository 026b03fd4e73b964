#include "services/worker/kv_cache/block_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

BlockManager::BlockManager(int num_blocks, int block_size)
    : block_size_(block_size),
      ref_counts_(num_blocks, 0),
      block_hash_(num_blocks, 0),
      has_hash_(num_blocks, 0),
      free_prev_(num_blocks, kNone),
      free_next_(num_blocks, kNone) {
  for (int32_t b = 0; b < num_blocks; ++b) FreeListPushBack(b);
}

float BlockManager::Usage() const {
  if (ref_counts_.empty()) return 0.0f;
  return 1.0f - static_cast<float>(num_free_) / static_cast<float>(ref_counts_.size());
}

uint64_t BlockManager::HashBlock(uint64_t previous_hash, std::span<const int32_t> tokens) {
  uint64_t h = Mix(previous_hash ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t t : tokens) h = Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x632be59bd9b4e019ULL));
  return h;
}

void BlockManager::FreeListRemove(int32_t block) {
  int32_t prev = free_prev_[block], next = free_next_[block];
  (prev == kNone ? free_head_ : free_next_[prev]) = next;
  (next == kNone ? free_tail_ : free_prev_[next]) = prev;
  free_prev_[block] = free_next_[block] = kNone;
  --num_free_;
}

void BlockManager::FreeListPushBack(int32_t block) {
  free_prev_[block] = free_tail_;
  free_next_[block] = kNone;
  (free_tail_ == kNone ? free_head_ : free_next_[free_tail_]) = block;
  free_tail_ = block;
  ++num_free_;
}

void BlockManager::Take(int32_t block) {
  if (ref_counts_[block] == 0) FreeListRemove(block);
  ++ref_counts_[block];
}

std::vector<int32_t> BlockManager::AcquireCachedPrefix(std::span<const int32_t> tokens, uint64_t seed) {
  std::vector<int32_t> blocks;
  uint64_t hash = seed;
  const size_t full_blocks = tokens.size() / block_size_;
  prefix_query_tokens_ += static_cast<int64_t>(tokens.size());
  for (size_t i = 0; i < full_blocks; ++i) {
    hash = HashBlock(hash, tokens.subspan(i * block_size_, block_size_));
    auto it = cached_blocks_.find(hash);
    if (it == cached_blocks_.end()) break;
    Take(it->second);
    blocks.push_back(it->second);
  }
  prefix_hit_tokens_ += static_cast<int64_t>(blocks.size()) * block_size_;
  return blocks;
}

std::optional<std::vector<int32_t>> BlockManager::Allocate(int count) {
  if (count > num_free_) return std::nullopt;
  std::vector<int32_t> blocks;
  blocks.reserve(count);
  for (int i = 0; i < count; ++i) {
    int32_t block = free_head_;
    FreeListRemove(block);
    if (has_hash_[block]) {  // evict its cached content
      auto it = cached_blocks_.find(block_hash_[block]);
      if (it != cached_blocks_.end() && it->second == block) cached_blocks_.erase(it);
      has_hash_[block] = 0;
    }
    ref_counts_[block] = 1;
    blocks.push_back(block);
  }
  return blocks;
}

void BlockManager::RegisterFullBlock(int32_t block, uint64_t hash) {
  if (has_hash_[block]) return;
  // Another block may already hold the same content (two requests prefilled
  // the same prefix concurrently); keep the first, this one stays uncached.
  if (!cached_blocks_.emplace(hash, block).second) return;
  block_hash_[block] = hash;
  has_hash_[block] = 1;
}

void BlockManager::Release(std::span<const int32_t> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    int32_t block = *it;
    if (--ref_counts_[block] == 0) FreeListPushBack(block);
  }
}

void BlockManager::ResetPrefixCache() {
  cached_blocks_.clear();
  std::fill(has_hash_.begin(), has_hash_.end(), 0);
}

absl::Status BlockManager::CheckIntegrity() const {
  int free_seen = 0;
  int32_t prev = kNone;
  for (int32_t b = free_head_; b != kNone; b = free_next_[b]) {
    if (ref_counts_[b] != 0) return absl::InternalError(absl::StrCat("free block ", b, " is referenced"));
    if (free_prev_[b] != prev) return absl::InternalError(absl::StrCat("free list broken at ", b));
    prev = b;
    if (++free_seen > num_blocks()) return absl::InternalError("free list has a cycle");
  }
  if (free_seen != num_free_) return absl::InternalError("free count mismatch");
  int unreferenced = 0;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    if (ref_counts_[b] < 0) return absl::InternalError(absl::StrCat("negative ref count on ", b));
    if (ref_counts_[b] == 0) ++unreferenced;
    if (has_hash_[b]) {
      auto it = cached_blocks_.find(block_hash_[b]);
      if (it == cached_blocks_.end() || it->second != b)
        return absl::InternalError(absl::StrCat("block ", b, " hash not indexed"));
    }
  }
  if (unreferenced != num_free_) return absl::InternalError("unreferenced blocks missing from free list");
  for (const auto& [hash, block] : cached_blocks_) {
    if (!has_hash_[block] || block_hash_[block] != hash)
      return absl::InternalError(absl::StrCat("index points at block ", block, " with another hash"));
  }
  return absl::OkStatus();
}

}  // namespace floe
