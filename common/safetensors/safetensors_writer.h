// Writes a .safetensors file: tensors are laid out contiguously, largest
// element size first so every tensor starts aligned to its element size, and
// the JSON header is space-padded to a multiple of 8 bytes (as the reference
// implementation does), so an mmapped reader gets aligned views.
//
// Usage: Add()/AddLazy() every tensor, then Write(). Single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tensor/dtype.h"

namespace floe {

absl::string_view SafetensorsDTypeName(DType dtype);  // "F32", "F16", "BF16"

class SafetensorsWriter {
 public:
  // Fills exactly `bytes` bytes of tensor data at Write() time, so a large
  // checkpoint never needs all its tensors in memory at once.
  using FillFn = std::function<void(uint8_t* out, size_t bytes)>;

  // `bytes` must hold exactly numel * element size. INVALID_ARGUMENT (naming
  // the tensor) on a size mismatch, a duplicate name or, for the string
  // overload, a dtype name safetensors does not define ("I8" is fine: tests
  // use it to build checkpoints Floe must reject).
  absl::Status Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                   std::vector<uint8_t> bytes);
  absl::Status Add(const std::string& name, absl::string_view safetensors_dtype,
                   std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  absl::Status AddLazy(const std::string& name, DType dtype, std::vector<int64_t> shape,
                       FillFn fill);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // Writes to `path` + ".tmp" then renames, so a failed write leaves no file
  // that looks complete.
  absl::Status Write(const std::string& path) const;

  uint64_t data_bytes() const { return data_bytes_; }
  size_t num_tensors() const { return tensors_.size(); }

 private:
  struct Pending {
    std::string name;
    std::string dtype_name;
    size_t element_size = 0;
    std::vector<int64_t> shape;
    uint64_t bytes = 0;
    std::vector<uint8_t> data;  // empty when `fill` produces it
    FillFn fill;
  };
  absl::Status AddPending(Pending pending);

  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_{{"format", "pt"}};
  uint64_t data_bytes_ = 0;
};

}  // namespace floe
