// Read-only access to one .safetensors file: an 8-byte little-endian header
// length, a JSON header ({name: {dtype, shape, data_offsets}}, optional
// "__metadata__"), then the raw tensor bytes.
//
// The file is mmapped (read-only, MAP_PRIVATE) and every tensor is returned as
// a TensorView pointing into the mapping (zero copy), valid while the
// SafetensorsFile lives. Open() validates the whole header up front (JSON,
// dtypes, shapes, offsets against the data section), so Get() only has to
// check the name and whether the dtype is one Floe computes in.
//
// Thread-safety: immutable after Open(); any thread may call the const methods.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/tensor_view.h"

namespace floe {

// Bytes per element of a safetensors dtype name ("F32", "I8", "BF16", ...), or
// 0 for a name the format does not define.
size_t SafetensorsDTypeSize(absl::string_view name);

class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype_name;  // as in the header, e.g. "BF16", "I8"
    std::vector<int64_t> shape;
    uint64_t begin = 0;  // offsets into the data section
    uint64_t end = 0;
  };

  // Errors (INVALID_ARGUMENT, or NOT_FOUND / the errno for I/O) name the file
  // and, where one is at fault, the tensor.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // A view into the mapping. NOT_FOUND names the tensor and file;
  // INVALID_ARGUMENT when its dtype is not F32/F16/BF16 (names tensor and dtype).
  absl::StatusOr<TensorView> Get(absl::string_view name) const;
  // Any dtype's tensor as its header entry and bytes (e.g. the I32 words of
  // packed weights, an I64 shape). NOT_FOUND names the tensor and file.
  struct Raw {
    const Entry* entry = nullptr;
    const uint8_t* data = nullptr;
    size_t bytes() const { return entry->end - entry->begin; }
  };
  absl::StatusOr<Raw> GetRaw(absl::string_view name) const;
  bool Contains(absl::string_view name) const;
  const Entry* FindEntry(absl::string_view name) const;

  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Drops the mapping's resident pages (the views stay valid: a later read
  // faults its page back in from the file). For a caller that has copied
  // what it needs, so the file no longer counts in its RSS.
  void ReleasePages() const;
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  absl::Status ParseHeader(absl::string_view header, uint64_t data_size);

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace floe
