// ChunkedArray: a growable array indexed by int32 that grows in fixed chunks
// of 2^kChunkBits elements once it passes one chunk, instead of doubling.
//
// A doubling vector holds up to 2x its size (a 10 M-token tree: hundreds of
// MB of slack, and a copy of everything at each doubling); here the slack is
// at most one chunk and growing never moves elements past the first chunk.
// The first chunk doubles from small, so small trees (a request's local tree)
// stay small. Elements are value-initialised. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace floe::suffix_cache {

template <typename T, int kChunkBits = 14>
class ChunkedArray {
 public:
  static constexpr size_t kChunk = size_t{1} << kChunkBits;

  T& operator[](size_t i) { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  const T& operator[](size_t i) const { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }

  size_t size() const { return size_; }
  // Elements allocated.
  size_t capacity() const { return first_capacity_ + (chunks_.empty() ? 0 : (chunks_.size() - 1) * kChunk); }
  size_t MemoryUsage() const {
    return capacity() * sizeof(T) + chunks_.capacity() * sizeof(std::unique_ptr<T[]>);
  }

  T& emplace_back() {
    if (size_ == capacity()) Grow();
    T& x = (*this)[size_++];
    x = T();
    return x;
  }

 private:
  void Grow() {
    if (chunks_.empty() || first_capacity_ < kChunk) {
      // Double the first chunk (moving its few elements).
      const size_t cap = chunks_.empty() ? 16 : first_capacity_ * 2;
      auto grown = std::make_unique<T[]>(cap);
      for (size_t i = 0; i < size_; ++i) grown[i] = chunks_[0][i];
      if (chunks_.empty()) {
        chunks_.push_back(std::move(grown));
      } else {
        chunks_[0] = std::move(grown);
      }
      first_capacity_ = cap;
      return;
    }
    chunks_.push_back(std::make_unique<T[]>(kChunk));
  }

  std::vector<std::unique_ptr<T[]>> chunks_;
  size_t first_capacity_ = 0;
  size_t size_ = 0;
};

}  // namespace floe::suffix_cache
