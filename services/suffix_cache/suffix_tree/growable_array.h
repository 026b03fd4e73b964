// GrowableArray: a contiguous array (a std::vector) that grows by a quarter
// of its size instead of doubling.
//
// A doubling vector holds up to 2x its size: on a large tree that is tens or
// hundreds of MB of capacity never used. Growing by 1/4 keeps the slack under
// 25% at an amortised cost of about four moves per element. (Chunked storage
// would bound the slack further, but its extra indirection on every node
// access cost 20-40% of append and speculate time.) Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace floe::suffix_cache {

template <typename T>
class GrowableArray {
 public:
  T& operator[](size_t i) { return items_[i]; }
  const T& operator[](size_t i) const { return items_[i]; }
  size_t size() const { return items_.size(); }
  size_t capacity() const { return items_.capacity(); }
  size_t MemoryUsage() const { return items_.capacity() * sizeof(T); }

  // Appends a value-initialised element (references may be invalidated).
  T& emplace_back() {
    if (items_.size() == items_.capacity()) {
      items_.reserve(items_.size() + std::max<size_t>(16, items_.size() / 4));
    }
    return items_.emplace_back();
  }

 private:
  std::vector<T> items_;
};

}  // namespace floe::suffix_cache
