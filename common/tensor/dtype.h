// Element types of weights and activations, and exact conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace floe {

enum class DType : uint8_t { kF32, kF16, kBF16 };

constexpr size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

absl::string_view DTypeName(DType dtype);  // "f32", "f16", "bf16"

// Safetensors spelling: "F32", "F16", "BF16". Anything else is INVALID_ARGUMENT.
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

}  // namespace floe
