// Element types of weights and activations, and exact conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace floe {

// kI8 and kF8E4M3 are the quantized weight types of compressed-tensors
// checkpoints (int8, and OCP float8 e4m3fn: 4 exponent bits, bias 7, no
// infinities, 0x7f/0xff NaN, largest finite 448). A matrix of either type
// carries a scale per output row (TensorView::row_scale).
enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kF8E4M3 };

constexpr size_t DTypeSize(DType dtype) {
  return dtype == DType::kF32 ? 4 : (dtype == DType::kI8 || dtype == DType::kF8E4M3) ? 1 : 2;
}
constexpr bool IsQuantized(DType dtype) { return dtype == DType::kI8 || dtype == DType::kF8E4M3; }

absl::string_view DTypeName(DType dtype);  // "f32", "f16", "bf16", "i8", "f8_e4m3"

// Safetensors spelling: "F32", "F16", "BF16", "I8", "F8_E4M3". Anything else
// is INVALID_ARGUMENT.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);
// Command-line spelling: "f32"/"fp32"/"float32", "f16"/"fp16"/"float16", "bf16"/"bfloat16".
absl::StatusOr<DType> ParseDTypeName(absl::string_view name);

inline float Bf16ToF32(uint16_t bits) {
  uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

// Round to nearest even, as PyTorch and NumPy-based converters do; NaN stays NaN.
inline uint16_t F32ToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);

// Elements [begin, begin + count) of a dense (f32, bf16 or f16) array,
// widened exactly into `out`. Reads through memcpy, so `data` may be a
// mapped file's unaligned offset. Returns false, writing nothing, for an
// 8-bit dtype (those need their scales).
bool WidenToF32(DType dtype, const void* data, int64_t begin, int64_t count, float* out);

// e4m3fn from its bits, exactly (a table of the 256 values).
float F8E4M3ToF32(uint8_t bits);
// That table, indexed by the bits: for loops that decode many.
const float* F8E4M3Values();
// Round to nearest even, saturating at +-448 (as PyTorch's
// to(float8_e4m3fn) after a clamp, which is how quantizers write it); NaN
// becomes 0x7f with its sign.
uint8_t F32ToF8E4M3(float value);

}  // namespace floe
