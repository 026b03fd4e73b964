// EdgeTable: the child index of a suffix tree, one open-addressing table for
// all (parent node, first token) -> child node edges of a tree.
//
// One flat table instead of a map per node keeps a node at a few int32 fields
// and a lookup at about one cache miss. Linear probing with backward-shift
// deletion (no tombstones), so long runs of inserts and erases (appends and
// evictions) never degrade it. Not thread-safe; owned by one SuffixTree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace floe::suffix_cache {

class EdgeTable {
 public:
  EdgeTable() { Rehash(16); }

  // Child of `parent` whose first token is `token`, or -1.
  int32_t Find(int32_t parent, int32_t token) const {
    const uint64_t key = Key(parent, token);
    for (size_t i = Slot(key);; i = (i + 1) & mask_) {
      if (values_[i] < 0) return -1;
      if (keys_[i] == key) return values_[i];
    }
  }

  // Inserts or overwrites the edge.
  void Set(int32_t parent, int32_t token, int32_t child) {
    if ((size_ + 1) * 4 > (mask_ + 1) * 3) Rehash((mask_ + 1) * 2);
    const uint64_t key = Key(parent, token);
    size_t i = Slot(key);
    for (; values_[i] >= 0; i = (i + 1) & mask_) {
      if (keys_[i] == key) {
        values_[i] = child;
        return;
      }
    }
    keys_[i] = key;
    values_[i] = child;
    ++size_;
  }

  // Removes the edge if present.
  void Erase(int32_t parent, int32_t token) {
    const uint64_t key = Key(parent, token);
    size_t i = Slot(key);
    for (;; i = (i + 1) & mask_) {
      if (values_[i] < 0) return;
      if (keys_[i] == key) break;
    }
    // Backward-shift: pull later members of the probe run into the hole.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; values_[j] >= 0; j = (j + 1) & mask_) {
      const size_t home = Slot(keys_[j]);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const bool home_after_hole = ((j - home) & mask_) < ((j - hole) & mask_);
      if (!home_after_hole) {
        keys_[hole] = keys_[j];
        values_[hole] = values_[j];
        hole = j;
      }
    }
    values_[hole] = -1;
    --size_;
    if (size_ * 8 < mask_ + 1 && mask_ + 1 > 16) Rehash((mask_ + 1) / 2);
  }

  size_t size() const { return size_; }

  // Raw slots, for SuffixTree's image: keys and values (-1: empty) of a
  // power-of-two table.
  const std::vector<uint64_t>& raw_keys() const { return keys_; }
  const std::vector<int32_t>& raw_values() const { return values_; }
  // Adopts raw slots; false (and no change) unless the capacity is a power
  // of two >= 16 with both arrays that long and at least one empty slot.
  bool AdoptRaw(std::vector<uint64_t> keys, std::vector<int32_t> values) {
    const size_t capacity = values.size();
    if (capacity < 16 || (capacity & (capacity - 1)) != 0 || keys.size() != capacity) return false;
    size_t used = 0;
    for (int32_t v : values) used += v >= 0;
    if (used == capacity) return false;  // Find would never stop
    keys_ = std::move(keys);
    values_ = std::move(values);
    mask_ = capacity - 1;
    shift_ = 64 - __builtin_ctzll(capacity);
    size_ = used;
    return true;
  }
  size_t MemoryUsage() const {
    return keys_.capacity() * sizeof(uint64_t) + values_.capacity() * sizeof(int32_t);
  }

 private:
  static uint64_t Key(int32_t parent, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) |
           static_cast<uint32_t>(token);
  }
  size_t Slot(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void Rehash(size_t capacity) {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<int32_t> old_values = std::move(values_);
    keys_.assign(capacity, 0);
    values_.assign(capacity, -1);
    mask_ = capacity - 1;
    shift_ = 64 - __builtin_ctzll(capacity);
    size_ = 0;
    for (size_t i = 0; i < old_values.size(); ++i) {
      if (old_values[i] < 0) continue;
      size_t j = Slot(old_keys[i]);
      while (values_[j] >= 0) j = (j + 1) & mask_;
      keys_[j] = old_keys[i];
      values_[j] = old_values[i];
      ++size_;
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<int32_t> values_;  // -1 marks an empty slot
  size_t mask_ = 0;
  int shift_ = 0;
  size_t size_ = 0;
};

}  // namespace floe::suffix_cache
