#include "common/tensor/dtype.h"

#include <cmath>
#include <cstring>
#include <vector>
#include <limits>

#include "gtest/gtest.h"

namespace floe {
namespace {

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway too: ties go to even (1 + 2^-6... mantissa 0x02).
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  for (float v : {0.0f, -2.5f, 3.140625f, 1e-20f, -65504.0f}) {
    EXPECT_EQ(Bf16ToF32(F32ToBf16(v)), Bf16ToF32(F32ToBf16(Bf16ToF32(F32ToBf16(v)))));
  }
}

TEST(DTypeTest, F16RoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t half = static_cast<uint16_t>(bits);
    if ((half & 0x7c00) == 0x7c00) continue;  // inf/nan
    EXPECT_EQ(F32ToF16(F16ToF32(half)), half) << bits;
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
}

TEST(DTypeTest, ParsesNames) {
  EXPECT_EQ(*ParseSafetensorsDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseSafetensorsDType("I8"), DType::kI8);
  EXPECT_EQ(*ParseSafetensorsDType("F8_E4M3"), DType::kF8E4M3);
  EXPECT_FALSE(ParseSafetensorsDType("F8_E5M2").ok());
  EXPECT_EQ(*ParseDTypeName("fp32"), DType::kF32);
  EXPECT_FALSE(ParseDTypeName("int4").ok());
}

// Dense arrays widen exactly, from any byte offset; 8-bit ones are refused.
TEST(DTypeTest, WidenToF32ReadsUnalignedDenseArrays) {
  const std::vector<float> want = {1.5f, -2.0f, 0.0078125f, 65504.0f};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    // One byte in: a mapped safetensors offset need not be aligned.
    std::vector<char> bytes(1 + want.size() * 4);
    for (size_t i = 0; i < want.size(); ++i) {
      if (dtype == DType::kF32) {
        std::memcpy(&bytes[1 + 4 * i], &want[i], 4);
      } else {
        const uint16_t bits = dtype == DType::kBF16 ? F32ToBf16(want[i]) : F32ToF16(want[i]);
        std::memcpy(&bytes[1 + 2 * i], &bits, 2);
      }
    }
    std::vector<float> got(3);
    ASSERT_TRUE(WidenToF32(dtype, bytes.data() + 1, 1, 3, got.data()));
    for (int i = 0; i < 3; ++i) {
      const float expected = dtype == DType::kBF16 ? Bf16ToF32(F32ToBf16(want[1 + i])) : want[1 + i];
      EXPECT_EQ(got[i], expected) << DTypeName(dtype) << " " << i;
    }
  }
  float untouched = 7;
  const uint8_t code = 0x38;
  EXPECT_FALSE(WidenToF32(DType::kF8E4M3, &code, 0, 1, &untouched));
  EXPECT_FALSE(WidenToF32(DType::kI8, &code, 0, 1, &untouched));
  EXPECT_EQ(untouched, 7);
}

// e4m3fn by its definition: the named codes, and every finite code encodes
// back to itself (the NumPy oracle in reference_quantized.py checks the
// rounding between codes).
TEST(DTypeTest, F8E4M3Codes) {
  // The table the kernels index, at named codes.
  EXPECT_EQ(F8E4M3Values()[0x38], 1.0f);
  EXPECT_EQ(F8E4M3Values()[0xfe], -448.0f);
  EXPECT_EQ(F8E4M3Values()[0x01], 0x1p-9f);
  EXPECT_TRUE(std::isnan(F8E4M3Values()[0x7f]));
  EXPECT_EQ(F8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(F8E4M3ToF32(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(0xb8), -1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xff)));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(F32ToF8E4M3(F8E4M3ToF32(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(F32ToF8E4M3(1e9f), 0x7e);  // saturates
  EXPECT_EQ(F32ToF8E4M3(-1e9f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(0x1p-11f), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(F32ToF8E4M3(0x1.8p-10f), 0x01);  // above half of it
}

}  // namespace
}  // namespace floe
