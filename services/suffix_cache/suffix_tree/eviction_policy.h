// EvictionPolicy: which cached response to drop when a suffix cache is over
// its budget. Two kinds:
//  * kFifo: the oldest response first (Suffix Decoding's reference policy).
//  * kUsage: FIFO with second chances earned by use. A response whose
//    continuation produced accepted draft tokens since it was last at the
//    front is moved to the back instead of being evicted (its credit is
//    spent), so responses that keep paying off stay while unused ones age
//    out in FIFO order. O(1) amortised per operation.
// Neither kind ever picks the `protect`ed id (the response just added).
//
// Intended use (SuffixSpeculator; the service store still runs its own FIFO
// and would use it the same way):
//  * Add(id) when a response enters the cache, Remove(id) when it leaves for
//    any other reason (replaced, aborted, namespace cleared);
//  * a draft names the cached response it was read from (Draft::source_seq);
//    keep it per request with the draft, and when the request's next tokens
//    are appended, Credit(source, number of draft tokens they confirmed);
//  * while over budget: id = PickVictim(newest); remove id from the tree.
// Ids are the caller's (the tree's sequence ids). Not thread-safe: call it
// under the lock that guards the tree it describes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe::suffix_cache {

enum class EvictionKind { kFifo, kUsage };

// "fifo" | "usage"; InvalidArgument otherwise.
absl::StatusOr<EvictionKind> ParseEvictionKind(absl::string_view name);
const char* EvictionKindName(EvictionKind kind);

class EvictionPolicy {
 public:
  explicit EvictionPolicy(EvictionKind kind = EvictionKind::kFifo) : kind_(kind) {}

  EvictionKind kind() const { return kind_; }
  // A response entered the cache (it is the newest). Re-adding a present id
  // moves it to the back with no credit.
  void Add(int32_t id);
  // A response left the cache; unknown ids are ignored.
  void Remove(int32_t id);
  // `accepted` draft tokens read from response `id` were accepted. Unknown
  // ids (already evicted) are ignored; FIFO ignores credit altogether.
  void Credit(int32_t id, int64_t accepted);
  // The response to evict next (and forgets it), never `protect`; -1 when
  // nothing else is cached.
  int32_t PickVictim(int32_t protect = -1);

  size_t size() const { return entries_.size(); }
  bool Contains(int32_t id) const { return entries_.contains(id); }
  int64_t credit(int32_t id) const;

 private:
  struct Entry {
    uint64_t order;  // position in queue_ (a stale queue slot has another)
    int64_t credit = 0;
  };
  struct Slot {
    int32_t id;
    uint64_t order;
  };
  void PushBack(int32_t id, int64_t credit);
  void DropStaleFront();

  EvictionKind kind_;
  absl::flat_hash_map<int32_t, Entry> entries_;
  // Oldest first; slots whose order no longer matches their entry are stale
  // (removed or moved) and skipped lazily.
  std::deque<Slot> queue_;
  uint64_t next_order_ = 0;
};

}  // namespace floe::suffix_cache
