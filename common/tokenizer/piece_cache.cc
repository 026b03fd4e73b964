#include "common/tokenizer/piece_cache.h"

#include "absl/hash/hash.h"

namespace floe {

PieceCache::Shard& PieceCache::ShardFor(absl::string_view piece) const {
  // High bits: the shard map uses the low ones for its own buckets.
  return shards_[(absl::Hash<absl::string_view>{}(piece) >> 52) % kShards];
}

bool PieceCache::Lookup(absl::string_view piece, std::vector<int32_t>* out) const {
  Shard& shard = ShardFor(piece);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.map.find(piece);
  if (it == shard.map.end()) return false;
  out->insert(out->end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::Insert(absl::string_view piece, const int32_t* ids, size_t count) const {
  if (piece.size() > kMaxPieceBytes) return;
  Shard& shard = ShardFor(piece);
  absl::MutexLock lock(&shard.mu);
  if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
  shard.map.try_emplace(piece, ids, ids + count);
}

}  // namespace floe
