#include "daemon/sources/synthetic_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "codec/common/bytes.h"

namespace epk::daemon {
namespace {

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(Conversions, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);   // max float rounds to infinity
  std::uint16_t nan = f32_to_bf16(from_bits(0x7F800001));  // a NaN with payload only in the low bits stays NaN
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
}

TEST(Conversions, F16EdgeValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);               // tie between max and 2^16: even is infinity
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -15)), 0x0200);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::nanf("")) & 0x7C00, 0x7C00);
  EXPECT_NE(f32_to_f16(std::nanf("")) & 0x03FF, 0);
}

#if defined(__FLT16_MAX__)
// The compiler's _Float16 conversion (round to nearest even) is the reference, bit for bit.
TEST(Conversions, F16MatchesTheCompilerOnRandomBitPatterns) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 1000000; ++i) {
    std::uint32_t b = rng();
    if (i % 2 == 0) b = (b & 0x807FFFFFu) | ((100u + rng() % 50u) << 23);  // concentrate near the f16 range
    float f = from_bits(b);
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    std::uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(f32_to_f16(f), want) << std::hex << "bits 0x" << b;
  }
}
#endif

TEST(SyntheticSource, ParsesSpecsAndNamesTensors) {
  auto s = SyntheticSource::create("3x5,w:7,q:2x3x4", std::chrono::microseconds(0));
  ASSERT_TRUE(s) << s.error().to_string();
  const auto& t = (*s)->tensors();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "t0");
  EXPECT_EQ(t[1].name, "w");
  EXPECT_EQ(t[2].shape, (std::vector<std::uint64_t>{2, 3, 4}));
  EXPECT_EQ(t[0].stored_bytes, 60u);
}

TEST(SyntheticSource, BadSpecsAreRefused) {
  for (const char* bad : {"", "0x4", "3x", "a:b:c", "x:4,x:5", "99999999x99999999", "1x2x3x4x5", ":4"}) {
    EXPECT_FALSE(SyntheticSource::create(bad, std::chrono::microseconds(0))) << bad;
  }
}

TEST(SyntheticSource, ProducesEveryDenseLayoutFromTheSameValues) {
  auto s = SyntheticSource::create("5x3", std::chrono::microseconds(0));
  ASSERT_TRUE(s);
  std::vector<std::uint8_t> f32(60), bf16(30), f16(30);
  ASSERT_TRUE((*s)->produce(0, shm::Layout::kDenseF32, f32));
  ASSERT_TRUE((*s)->produce(0, shm::Layout::kDenseBF16, bf16));
  ASSERT_TRUE((*s)->produce(0, shm::Layout::kDenseF16, f16));
  for (std::size_t i = 0; i < 15; ++i) {
    float v = load_le<float>(f32.data() + i * 4);
    EXPECT_EQ(v, synthetic_value(0, i));
    EXPECT_EQ(load_le<std::uint16_t>(bf16.data() + i * 2), f32_to_bf16(v));
    EXPECT_EQ(load_le<std::uint16_t>(f16.data() + i * 2), f32_to_f16(v));
  }
  auto st = (*s)->served(0, shm::Layout::kDenseBF16);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->strides, (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ((*s)->produce_count(), 3u);
}

TEST(SyntheticSource, UnservedLayoutWrongSizeAndCorruptTensorAreErrors) {
  auto s = SyntheticSource::create("w:4x4,bad:2:corrupt", std::chrono::microseconds(0));
  ASSERT_TRUE(s);
  auto r = (*s)->served(0, shm::Layout::kRowwiseI8);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  std::vector<std::uint8_t> small(10);
  EXPECT_FALSE((*s)->produce(0, shm::Layout::kStored, small));
  std::vector<std::uint8_t> two(8);
  auto c = (*s)->produce(1, shm::Layout::kStored, two);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kCorruptTile);
  EXPECT_NE(c.error().message.find("'bad'"), std::string::npos);
}

}  // namespace
}  // namespace epk::daemon
