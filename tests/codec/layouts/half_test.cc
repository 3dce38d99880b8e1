#include "codec/common/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace epk::layouts {
namespace {

// GCC and Clang on x86-64 provide _Float16 with correctly rounded conversions: an independent oracle.
TEST(Half, EveryF16WidensExactly) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    _Float16 ref = std::bit_cast<_Float16>(static_cast<std::uint16_t>(h));
    float got = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(static_cast<float>(ref))) {
      EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(static_cast<float>(ref))) << h;
    ASSERT_EQ(f32_to_f16(got), h) << h;
  }
}

TEST(Half, F32NarrowsLikeTheCompiler) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    // Bias exponents into and around the half range so subnormals, ties and overflow are all hit.
    std::uint32_t bits = rng();
    bits = (bits & 0x807FFFFFu) | ((96u + rng() % 64u) << 23);
    if (i % 4 == 0) bits &= 0xFFFFE000u | (1u << 12);  // exact ties and near-ties
    float f = std::bit_cast<float>(bits);
    std::uint16_t ref = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(f32_to_f16(f), ref) << std::hex << bits;
  }
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFFu);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00u);  // the tie above max rounds to inf
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80u);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80u);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82u);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81u);
  EXPECT_EQ(bf16_to_f32(0xC040u), -3.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace epk::layouts
