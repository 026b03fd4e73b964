// GrowableArray: a contiguous array of trivially copyable elements that grows
// without copying once it is large.
//
// A suffix tree's node array is its biggest allocation and grows one node at
// a time. A std::vector would double (up to 2x capacity never used) and copy
// every element on each growth, onto fresh memory that page-faults again:
// growth was 10-15% of append time. Here small arrays (under kMapBytes, e.g.
// a request's local tree) live on the heap and double; large ones are an
// anonymous mapping extended by mremap, which moves page tables instead of
// bytes, so they can grow in small steps (1/16, at least one 2 MiB huge
// page) and keep little slack. Large mappings ask for transparent huge pages
// (fewer TLB misses on a tree's random accesses). Not thread-safe.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace floe::suffix_cache {

template <typename T>
class GrowableArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "elements are relocated by memcpy and mremap");

 public:
  GrowableArray() = default;
  GrowableArray(const GrowableArray&) = delete;
  GrowableArray& operator=(const GrowableArray&) = delete;
  GrowableArray(GrowableArray&& other) noexcept { Take(other); }
  GrowableArray& operator=(GrowableArray&& other) noexcept {
    if (this != &other) {
      Release();
      Take(other);
    }
    return *this;
  }
  ~GrowableArray() { Release(); }

  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t MemoryUsage() const { return capacity_ * sizeof(T); }

  const T* data() const { return data_; }

  // Replaces the contents with copies of items[0, n).
  void Assign(const T* items, size_t n) {
    Release();
    Reserve(std::max<size_t>(16, n));
    if (n > 0) std::memcpy(static_cast<void*>(data_), items, n * sizeof(T));
    size_ = n;
  }

  // Appends a value-initialised element (references may be invalidated).
  T& emplace_back() {
    if (size_ == capacity_) Grow();
    return *new (data_ + size_++) T();
  }

  // Growth policy, public for tests: heap and doubling below kMapBytes,
  // mapped and growing by max(1/16, kStepBytes) in kStepBytes units above.
  static constexpr size_t kMapBytes = size_t{1} << 20;
  static constexpr size_t kStepBytes = size_t{2} << 20;  // one x86-64 huge page

 private:
  void Grow() {
    const size_t bytes = capacity_ * sizeof(T);
    if (bytes < kMapBytes) {
      ResizeHeap(std::max<size_t>(16, 2 * capacity_));
    } else {
      Reserve((bytes + std::max(bytes / 16, kStepBytes)) / sizeof(T));
    }
  }

  void ResizeHeap(size_t capacity) {
    void* p = std::realloc(data_, capacity * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
    capacity_ = capacity;
  }

  // Room for at least `n` elements, keeping the first size_: on the heap
  // below kMapBytes, else a mapping in kStepBytes units, which later growth
  // extends by mremap (page tables move, bytes do not).
  void Reserve(size_t n) {
    if (n <= capacity_) return;
    const size_t bytes = n * sizeof(T);
    if (bytes < kMapBytes && mapped_bytes_ == 0) {
      ResizeHeap(n);
      return;
    }
    const size_t mapped = (bytes + kStepBytes - 1) / kStepBytes * kStepBytes;
    void* p;
    if (mapped_bytes_ > 0) {
      p = mremap(data_, mapped_bytes_, mapped, MREMAP_MAYMOVE);
      if (p == MAP_FAILED) throw std::bad_alloc();
    } else {
      p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      if (size_ > 0) std::memcpy(p, static_cast<void*>(data_), size_ * sizeof(T));
      std::free(data_);
    }
    madvise(p, mapped, MADV_HUGEPAGE);  // advice only: may be refused
    data_ = static_cast<T*>(p);
    mapped_bytes_ = mapped;
    capacity_ = mapped / sizeof(T);
  }

  void Release() {
    if (mapped_bytes_ > 0) {
      munmap(data_, mapped_bytes_);
    } else {
      std::free(data_);
    }
    data_ = nullptr;
    size_ = capacity_ = mapped_bytes_ = 0;
  }

  void Take(GrowableArray& other) {
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  size_t mapped_bytes_ = 0;  // 0: heap storage
};

}  // namespace floe::suffix_cache
