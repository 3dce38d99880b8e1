// rans::decode_rowwise, the CPU oracle of the GPU decoder's rowwise outputs (int8 and fp8 e4m3 with one fp32 scale
// per row): q * row_scale against the dense fp32 decode, the gains, row ranges and bad buffers. Uses the committed
// reference-package vectors of tests/data/cuda.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "codec/common/float_convert.h"
#include "codec/rans/decoder.h"
#include "tests/codec/cuda/raw_stream_file.h"
#include "tests/codec/cuda/test_data.h"

namespace epk::rans {
namespace {

testing::RawStream load(const std::string& name) {
  auto raw = testing::read_raw_stream(testing::cuda_data_dir() + "/" + name + ".epkraw");
  EXPECT_TRUE(raw) << raw.error().to_string();
  return raw ? std::move(*raw) : testing::RawStream{};
}

std::vector<float> dense_f32(const LatticeRansStream& s) {
  std::vector<float> f(std::size_t{s.rows} * s.cols);
  EXPECT_TRUE(decode(s, "w", DType::kF32, std::as_writable_bytes(std::span(f))));
  return f;
}

struct Rowwise {
  std::vector<std::uint8_t> q;
  std::vector<float> scales;
};

Rowwise rowwise(const LatticeRansStream& s, RowwiseType type, std::uint32_t b, std::uint32_t e) {
  Rowwise r{std::vector<std::uint8_t>(std::size_t{e - b} * s.cols, 0xAB), std::vector<float>(e - b, -1.0f)};
  const Status st = decode_rowwise(s, "w", type, std::as_writable_bytes(std::span(r.q)), r.scales, b, e);
  EXPECT_TRUE(st) << st.error().to_string();
  return r;
}

TEST(RowwiseInt8, LosslessWhenTheTablesFitInt8) {
  const testing::RawStream raw = load("gauss_29x520_2bpp");
  const LatticeRansStream s = raw.view();
  const RowwiseGain g = rowwise_gain(s, RowwiseType::kInt8);
  ASSERT_LE(g.bound, 127);
  ASSERT_EQ(g.gain, 1.0f);
  const Rowwise r = rowwise(s, RowwiseType::kInt8, 0, s.rows);
  const std::vector<float> f = dense_f32(s);
  for (std::size_t i = 0; i < r.q.size(); ++i) {
    const float w = static_cast<float>(static_cast<std::int8_t>(r.q[i])) * r.scales[i / s.cols];
    ASSERT_EQ(w, f[i]) << i;  // 2p * (scale / 2) == (z + c/2) * scale exactly (one rounding of the same product)
  }
}

TEST(RowwiseInt8, WideTablesUseAGainBelowOneAndStayWithinHalfAStep) {
  const testing::RawStream raw = load("studentt_16x1024_8bpp");
  const LatticeRansStream s = raw.view();
  const RowwiseGain g = rowwise_gain(s, RowwiseType::kInt8);
  ASSERT_GT(g.bound, 127);
  EXPECT_LT(g.gain, 1.0f);
  EXPECT_FLOAT_EQ(g.half_over_gain * g.gain, 0.5f);
  const Rowwise r = rowwise(s, RowwiseType::kInt8, 0, s.rows);
  const std::vector<float> f = dense_f32(s);
  for (std::size_t i = 0; i < r.q.size(); ++i) {
    const auto q = static_cast<std::int8_t>(r.q[i]);
    ASSERT_GE(q, -127) << i;
    const float step = r.scales[i / s.cols];
    ASSERT_LE(std::fabs(q * step - f[i]), 0.5f * step * 1.0001f) << i;
  }
}

TEST(RowwiseFp8, ValuesAreTheE4M3RoundingOfTwiceTheLatticePoint) {
  for (const char* name : {"gauss_29x520_4bpp", "studentt_16x1024_8bpp"}) {
    const testing::RawStream raw = load(name);
    const LatticeRansStream s = raw.view();
    const RowwiseGain g = rowwise_gain(s, RowwiseType::kF8E4M3);
    const Rowwise r = rowwise(s, RowwiseType::kF8E4M3, 0, s.rows);
    const std::vector<float> f = dense_f32(s);
    for (std::size_t i = 0; i < r.q.size(); ++i) {
      const float row_scale = r.scales[i / s.cols];
      ASSERT_EQ(row_scale, s.scales[i / s.cols] * g.half_over_gain);
      // 2p * gain from the dense decode: f / (scale / 2) is exact when gain is 1 (p * scale rounded once).
      const float twice_p = std::nearbyint(f[i] / (s.scales[i / s.cols] * 0.5f));
      ASSERT_EQ(r.q[i], f8e4m3_from_float(std::clamp(twice_p * g.gain, -448.0f, 448.0f))) << name << " " << i;
    }
  }
}

TEST(RowwiseRange, EqualsTheSliceOfAFullDecode) {
  const testing::RawStream raw = load("gauss_13x100_4bpp");
  const LatticeRansStream s = raw.view();
  for (RowwiseType type : {RowwiseType::kInt8, RowwiseType::kF8E4M3}) {
    const Rowwise full = rowwise(s, type, 0, s.rows);
    const std::uint32_t b = 3, e = 11;
    const Rowwise part = rowwise(s, type, b, e);
    EXPECT_TRUE(std::equal(part.q.begin(), part.q.end(), full.q.begin() + std::size_t{b} * s.cols));
    EXPECT_TRUE(std::equal(part.scales.begin(), part.scales.end(), full.scales.begin() + b));
  }
}

TEST(RowwiseBadInput, WrongBufferSizesAreRefusedWithTheTensorName) {
  const testing::RawStream raw = load("gauss_13x100_4bpp");
  const LatticeRansStream s = raw.view();
  std::vector<std::uint8_t> q(std::size_t{s.rows} * s.cols);
  std::vector<float> scales(s.rows - 1);
  const Status st =
      decode_rowwise(s, "blk.3.ffn_up", RowwiseType::kInt8, std::as_writable_bytes(std::span(q)), scales, 0, s.rows);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.error().message.find("blk.3.ffn_up"), std::string::npos);
  scales.resize(s.rows);
  q.pop_back();
  EXPECT_FALSE(decode_rowwise(s, "w", RowwiseType::kF8E4M3, std::as_writable_bytes(std::span(q)), scales, 0, s.rows));
}

TEST(RowwiseBadInput, ACorruptTileIsReported) {
  testing::RawStream raw = load("gauss_29x520_8bpp");
  ASSERT_GE(raw.offsets.size(), 4u);
  raw.payload[(raw.offsets[2] + raw.offsets[3]) / 2] ^= 0x5a5a;
  const LatticeRansStream s = raw.view();
  std::vector<std::uint8_t> q(std::size_t{s.rows} * s.cols);
  std::vector<float> scales(s.rows);
  std::vector<TileFaultRecord> faults;
  const Status st =
      decode_rowwise(s, "w", RowwiseType::kInt8, std::as_writable_bytes(std::span(q)), scales, 0, s.rows, 1, &faults);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kCorruptTile);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].tile, 2u);
}

}  // namespace
}  // namespace epk::rans
