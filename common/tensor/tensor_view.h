// A non-owning view of a dense row-major tensor in host memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor/dtype.h"

namespace floe {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // null: tensor absent (optional weights such as biases)
  // Quantized dtypes (kI8, kF8E4M3) only: one scale per row, the matrix's
  // value being data[r][c] * row_scale[r]; owned by whoever owns data.
  const float* row_scale = nullptr;
  // kI8 only: each stored byte XOR this is the weight's bits.
  // compressed-tensors' pack-quantized layout stores q + 128, which is q's
  // bits with the top one flipped (0x80); plain int8 stores q (0).
  uint8_t byte_xor = 0;

  bool present() const { return data != nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t dim : shape) n *= dim;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
};

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace floe
