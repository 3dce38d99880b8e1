// The scalar CPU reference of the GPU decoder against the reference package's own decoder outputs (committed
// vectors), its conversions at edge values, and its corrupt-tile detection. Runs without a GPU.
#include "codec/cuda/decode_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/codec/cuda/raw_stream_file.h"
#include "tests/codec/cuda/test_data.h"

namespace epk::cuda {
namespace {

using testing::read_raw_stream;

class ReferenceVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceVectors, MatchesTheReferencePackageBitForBit) {
  auto raw = read_raw_stream(testing::cuda_data_dir() + "/" + GetParam() + ".epkraw");
  ASSERT_TRUE(raw) << raw.error().to_string();
  ASSERT_FALSE(raw->outputs.empty());
  const rans::LatticeRansStream s = raw->view();
  for (const auto& [fmt, expected] : raw->outputs) {
    const auto format = static_cast<OutputFormat>(fmt);
    std::vector<std::uint8_t> out(expected.size(), 0xAB);
    std::vector<TileFaultRecord> faults;
    ASSERT_TRUE(decode_reference(s, format, 0, 0, out, {}, &faults));
    EXPECT_TRUE(faults.empty());
    std::size_t first_diff = out.size();
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i] != expected[i]) {
        first_diff = i;
        break;
      }
    }
    EXPECT_EQ(first_diff, out.size()) << output_format_name(format) << ": first differing byte " << first_diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Committed, ReferenceVectors, ::testing::ValuesIn(testing::cuda_vector_names()));

TEST(ReferenceRowRange, EqualsTheSliceOfAFullDecode) {
  auto raw = read_raw_stream(testing::cuda_data_dir() + "/gauss_29x520_4bpp.epkraw");
  ASSERT_TRUE(raw);
  const rans::LatticeRansStream s = raw->view();
  std::vector<std::uint8_t> full(std::size_t{s.rows} * s.cols * 2);
  ASSERT_TRUE(decode_reference(s, OutputFormat::kBf16, 0, 0, full, {}, nullptr));
  const std::uint32_t b = 7, e = 23;
  std::vector<std::uint8_t> part(std::size_t{e - b} * s.cols * 2, 0xAB);
  ASSERT_TRUE(decode_reference(s, OutputFormat::kBf16, b, e, part, {}, nullptr));
  EXPECT_TRUE(std::equal(part.begin(), part.end(), full.begin() + std::size_t{b} * s.cols * 2));
}

TEST(ReferenceCorruption, AFlippedWordIsReportedWithItsTile) {
  auto raw = read_raw_stream(testing::cuda_data_dir() + "/gauss_29x520_8bpp.epkraw");
  ASSERT_TRUE(raw);
  ASSERT_GE(raw->offsets.size(), 4u);
  const std::uint32_t tile = 2;
  raw->payload[(raw->offsets[tile] + raw->offsets[tile + 1]) / 2] ^= 0x5a5a;
  const rans::LatticeRansStream s = raw->view();
  std::vector<std::uint8_t> out(std::size_t{s.rows} * s.cols * 4);
  std::vector<TileFaultRecord> faults;
  ASSERT_TRUE(decode_reference(s, OutputFormat::kFp32, 0, 0, out, {}, &faults));
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].tile, tile);
}

TEST(ReferenceConversions, Fp16EdgeValues) {
  EXPECT_EQ(float_to_fp16_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16_bits(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16_bits(1.0e9f), 0x7BFF);     // clamped, not inf
  EXPECT_EQ(float_to_fp16_bits(-1.0e9f), 0xFBFF);
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(float_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie to even
  EXPECT_EQ(float_to_fp16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(float_to_fp16_bits(-0.0f), 0x8000);
}

TEST(ReferenceConversions, Fp8EdgeValues) {
  EXPECT_EQ(float_to_e4m3_bits(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3_bits(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3_bits(1000.0f), 0x7E);  // saturates, never NaN (0x7F)
  EXPECT_EQ(float_to_e4m3_bits(-1000.0f), 0xFE);
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -10)), 0x00);  // tie to even
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(3.0f, -10)), 0x02);  // tie to even (1.5 quanta -> 2)
  EXPECT_EQ(float_to_e5m2_bits(1.0f), 0x3C);
  EXPECT_EQ(float_to_e5m2_bits(57344.0f), 0x7B);
  EXPECT_EQ(float_to_e5m2_bits(1.0e9f), 0x7B);
  EXPECT_EQ(float_to_e5m2_bits(std::ldexp(1.0f, -16)), 0x01);
}

TEST(ReferenceConversions, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);       // tie -> even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);   // tie -> even (up)
  EXPECT_EQ(float_to_bf16_bits(-3.0f), 0xC040);
}

TEST(ReferenceInt8Rowwise, LosslessWhenTheTablesFitInt8) {
  auto raw = read_raw_stream(testing::cuda_data_dir() + "/gauss_29x520_2bpp.epkraw");
  ASSERT_TRUE(raw);
  const rans::LatticeRansStream s = raw->view();
  const Int8Gain g = int8_gain(s);
  ASSERT_EQ(g.gain, 1.0f);
  std::vector<std::uint8_t> q(std::size_t{s.rows} * s.cols);
  std::vector<float> rs(s.rows);
  ASSERT_TRUE(decode_reference(s, OutputFormat::kInt8Rowwise, 0, 0, q, rs, nullptr));
  std::vector<std::uint8_t> f(std::size_t{s.rows} * s.cols * 4);
  ASSERT_TRUE(decode_reference(s, OutputFormat::kFp32, 0, 0, f, {}, nullptr));
  for (std::size_t i = 0; i < q.size(); ++i) {
    float v;
    std::memcpy(&v, f.data() + i * 4, 4);
    const float w = static_cast<float>(static_cast<std::int8_t>(q[i])) * rs[i / s.cols];
    ASSERT_NEAR(w, v, std::fabs(v) * 1e-6f) << i;
  }
}

TEST(ReferenceInt8Rowwise, GainBelowOneWhenTheTablesAreWide) {
  auto raw = read_raw_stream(testing::cuda_data_dir() + "/studentt_16x1024_8bpp.epkraw");
  ASSERT_TRUE(raw);
  const Int8Gain g = int8_gain(raw->view());
  EXPECT_LT(g.gain, 1.0f);
  EXPECT_FLOAT_EQ(g.half_over_gain * g.gain, 0.5f);
}

}  // namespace
}  // namespace epk::cuda
