// Thread-safe cache from a pre-tokenized piece to its BPE ids, shared by all
// Encode calls of one tokenizer (text repeats words far more than it coins
// them). Sharded mutexes keep concurrent encoders from contending; a shard that
// fills up is cleared, which bounds memory without LRU bookkeeping.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace floe {

class PieceCache {
 public:
  // Pieces longer than this are not cached (rare, and costly to keep).
  static constexpr size_t kMaxPieceBytes = 256;

  // Appends the cached ids for `piece` to `out` and returns true, or returns false.
  bool Lookup(absl::string_view piece, std::vector<int32_t>* out) const;
  void Insert(absl::string_view piece, const int32_t* ids, size_t count) const;

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map ABSL_GUARDED_BY(mu);
  };
  Shard& ShardFor(absl::string_view piece) const;

  mutable std::array<Shard, kShards> shards_;
};

}  // namespace floe
