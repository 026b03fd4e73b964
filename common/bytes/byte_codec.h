// Plain-data byte encoding for Floe's on-disk formats (suffix-cache snapshots
// and suffix-tree images): appenders onto a std::string and a bounds-checked
// reader. Values are copied in host byte order; the formats say
// little-endian, which every host Floe builds for is.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace floe {

template <typename T>
void AppendPod(std::string* out, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// A `Count`-typed element count, then the elements.
template <typename Count, typename T>
void AppendCounted(std::string* out, const T* items, size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  AppendPod(out, static_cast<Count>(n));
  out->append(reinterpret_cast<const char*>(items), n * sizeof(T));
}

// Reads what the appenders wrote. Every read checks the bounds; the first
// failure sticks (error(): "truncated at byte N reading WHAT") and fails
// every later read.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  bool Pod(T* value, const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (!Need(sizeof(T), what)) return false;
    std::memcpy(value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  // A counted array left where it is: `*items` points at its first element
  // (unaligned: copy the elements out).
  template <typename Count, typename T>
  bool CountedInPlace(const char** items, size_t* n, const char* what) {
    Count count = 0;
    if (!Pod(&count, what)) return false;
    if (static_cast<size_t>(count) > (bytes_.size() - pos_) / sizeof(T)) return Fail(what);
    *items = bytes_.data() + pos_;
    *n = static_cast<size_t>(count);
    pos_ += *n * sizeof(T);
    return true;
  }

  // A counted array into a std::vector or std::string.
  template <typename Count, typename Container>
  bool Counted(Container* out, const char* what) {
    using T = typename Container::value_type;
    const char* items = nullptr;
    size_t n = 0;
    if (!CountedInPlace<Count, T>(&items, &n, what)) return false;
    out->resize(n);
    if (n > 0) std::memcpy(out->data(), items, n * sizeof(T));
    return true;
  }

  // Everything read, nothing failed.
  bool done() const { return error_.empty() && pos_ == bytes_.size(); }
  const std::string& error() const { return error_; }

 private:
  bool Need(size_t n, const char* what) { return (error_.empty() && bytes_.size() - pos_ >= n) || Fail(what); }
  bool Fail(const char* what) {
    if (error_.empty()) error_ = absl::StrCat("truncated at byte ", pos_, " reading ", what);
    return false;
  }

  absl::string_view bytes_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace floe
