#include "common/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tpserve {
namespace {

// Bit patterns from the IEEE 754 binary16 and bfloat16 definitions.
TEST(DType, HalfKnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(1e6f), 0x7C00);                  // overflow -> +inf
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_FLOAT_EQ(F16ToF32(0x3555), 0.333251953125f);
  EXPECT_FLOAT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(F16ToF32(0xFC00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
}

TEST(DType, HalfEveryPatternMatchesDefinition) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    if (exponent == 0x1f) continue;
    // binary16 value from its definition, in double.
    double value = exponent == 0 ? std::ldexp(mantissa, -24)
                                 : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    if (bits & 0x8000) value = -value;
    ASSERT_EQ(F16ToF32(static_cast<uint16_t>(bits)), static_cast<float>(value)) << bits;
    ASSERT_EQ(F32ToF16(static_cast<float>(value)), bits) << bits;
  }
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBF16(-1.5f), 0xBFC0);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(BF16ToF32(0x4049), 3.140625f);
}

TEST(DType, ConvertElementsBetweenTypes) {
  const float source[3] = {0.5f, -3.0f, 1024.0f};
  uint16_t half[3];
  ConvertElements(source, DType::kF32, half, DType::kF16, 3);
  EXPECT_EQ(half[0], 0x3800);
  EXPECT_EQ(half[1], 0xC200);
  EXPECT_EQ(half[2], 0x6400);
  uint16_t brain[3];
  ConvertElements(half, DType::kF16, brain, DType::kBF16, 3);
  EXPECT_EQ(brain[0], 0x3F00);
  EXPECT_EQ(brain[1], 0xC040);
  EXPECT_EQ(brain[2], 0x4480);
}

TEST(DType, Names) {
  EXPECT_EQ(DTypeFromName("BF16"), DType::kBF16);
  EXPECT_EQ(DTypeFromName("F64"), std::nullopt);
  EXPECT_EQ(DTypeName(DType::kF16), "F16");
}

}  // namespace
}  // namespace tpserve
