#include "codec/common/float_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace epk {
namespace {

TEST(FloatConvert, EveryFiniteNarrowValueRoundTrips) {
  for (std::uint32_t b = 0; b < 256; ++b) {
    const float e4 = float_from_f8e4m3(std::uint8_t(b));
    if (!std::isnan(e4)) {
      EXPECT_EQ(f8e4m3_from_float(e4), b) << b;
    }
    const float e5 = float_from_f8e5m2(std::uint8_t(b));
    if (std::isfinite(e5)) {
      EXPECT_EQ(f8e5m2_from_float(e5), b) << b;
    }
  }
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float h = float_from_f16(std::uint16_t(b));
    if (std::isfinite(h)) {
      ASSERT_EQ(f16_from_float(h), b) << b;
    }
    const float bf = float_from_bf16(std::uint16_t(b));
    if (std::isfinite(bf)) {
      ASSERT_EQ(bf16_from_float(bf), b) << b;
    }
  }
}

TEST(FloatConvert, KnownValues) {
  EXPECT_EQ(float_from_f8e4m3(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(float_from_f8e4m3(0x7F)));
  EXPECT_EQ(float_from_f8e4m3(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(float_from_f8e5m2(0x7B), 57344.0f);
  EXPECT_TRUE(std::isinf(float_from_f8e5m2(0x7C)));
  EXPECT_EQ(float_from_f16(0x7BFF), 65504.0f);
  EXPECT_EQ(float_from_f16(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(float_from_bf16(0x3F80), 1.0f);
}

TEST(FloatConvert, RoundsHalfToEvenIncludingSubnormals) {
  // halfway between 1.0 and the next fp16 (1 + 2^-10): ties to the even mantissa (1.0)
  EXPECT_EQ(f16_from_float(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f16_from_float(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // halfway between the two smallest fp16 subnormals
  EXPECT_EQ(f16_from_float(std::ldexp(1.5f, -24)), 0x0002);
  EXPECT_EQ(f16_from_float(std::ldexp(0.5f, -24)), 0x0000);
  // e4m3: 1.0625 lies halfway between 1.0 and 1.125
  EXPECT_EQ(f8e4m3_from_float(1.0625f), 0x38);
  EXPECT_EQ(f8e4m3_from_float(-1.1875f), 0xBA);  // halfway 1.125 / 1.25 -> 1.25 (even)
  // bf16: ties to even on the 16 dropped bits
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F808000u)), 0x3F80);
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F818000u)), 0x3F82);
  // rounding up into the next binade
  EXPECT_EQ(f8e5m2_from_float(std::ldexp(1.9f, 3)), f8e5m2_from_float(16.0f));
}

}  // namespace
}  // namespace epk
