#include "common/tensor/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace floe {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "i8";
    case DType::kF8E4M3: return "f8_e4m3";
  }
  return "?";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "I8") return DType::kI8;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype \"", name, "\" (supported: F32, F16, BF16, I8, F8_E4M3)"));
}

absl::StatusOr<DType> ParseDTypeName(absl::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype \"", name, "\" (supported: f32, f16, bf16)"));
}

bool WidenToF32(DType dtype, const void* data, int64_t begin, int64_t count, float* out) {
  const char* bytes = static_cast<const char*>(data);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, bytes + begin * sizeof(float), count * sizeof(float));
      return true;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + (begin + i) * sizeof(bits), sizeof(bits));
        out[i] = dtype == DType::kBF16 ? Bf16ToF32(bits) : F16ToF32(bits);
      }
      return true;
    case DType::kI8:
    case DType::kF8E4M3:
      return false;
  }
  return false;
}

float F16ToF32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      out = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

uint16_t F32ToF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t sign = (bits >> 16) & 0x8000u;
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if (((bits >> 23) & 0xffu) == 0xffu) {
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  }
  if (exponent >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t remainder = mantissa & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

namespace {

struct F8Table {
  float value[256];
  F8Table() {
    for (int bits = 0; bits < 256; ++bits) {
      const int exponent = (bits >> 3) & 0xf, mantissa = bits & 7;
      float v = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
      if ((bits & 0x7f) == 0x7f) v = std::numeric_limits<float>::quiet_NaN();
      value[bits] = (bits & 0x80) ? -v : v;
    }
  }
};

const F8Table& F8Values() {
  static const F8Table table;
  return table;
}

}  // namespace

float F8E4M3ToF32(uint8_t bits) { return F8Values().value[bits]; }

const float* F8E4M3Values() { return F8Values().value; }

uint8_t F32ToF8E4M3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return sign | 0x7f;
  const float a = std::fabs(value);
  if (a >= 448.0f) return sign | 0x7e;
  // nearbyint rounds ties to even under the default rounding mode, and every
  // scaling below is by a power of two, so exact.
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // subnormals; 8 is 2^-6
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int q = static_cast<int>(std::nearbyint((m * 2.0f - 1.0f) * 8.0f));
  int exponent = e - 1 + 7;
  if (q == 8) {  // rounded up to the next power of two
    q = 0;
    ++exponent;
  }
  return sign | static_cast<uint8_t>(std::min(0x7e, exponent << 3 | q));
}

}  // namespace floe
