#include "codec/rate/encode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "codec/common/float_convert.h"
#include "codec/rans/decoder.h"
#include "codec/rans/native_format.h"
#include "codec/rans/reference_format.h"
#include "codec/rate/rdo.h"
#include "codec/rate/search.h"

namespace epk::rate {
namespace {

std::vector<float> layer(std::uint32_t rows, std::uint32_t cols, std::uint32_t seed, bool heavy) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> w(std::size_t(rows) * cols);
  for (std::uint32_t r = 0; r < rows; ++r) {
    const float s = 0.02f * std::exp(n(rng));
    for (std::uint32_t c = 0; c < cols; ++c) w[std::size_t(r) * cols + c] = (heavy ? t(rng) : n(rng)) * s;
  }
  return w;
}

std::span<const std::byte> bytes_of(const std::vector<float>& w) {
  return {reinterpret_cast<const std::byte*>(w.data()), w.size() * 4};
}

TEST(Encode, StoredRateTracksTheTarget) {
  const std::uint32_t rows = 512, cols = 1000;
  for (bool heavy : {false, true}) {
    const auto w = layer(rows, cols, 1, heavy);
    for (double target : {2.0, 3.0, 4.0, 5.0, 6.0, 8.0}) {
      EncodeOptions o;
      o.target_bpp = target;
      o.threads = 2;
      auto e = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
      ASSERT_TRUE(e.has_value()) << e.error().to_string();
      const double stored = 8.0 * double(rans::reference_quant_state_bytes(*e)) / (double(rows) * cols);
      EXPECT_NEAR(stored / target, 1.0, 0.01) << "target " << target << (heavy ? " student-t" : " gaussian");
    }
  }
}

// The target counts what options.stored_bytes says is stored, whether the sample is the whole tensor (its rate
// measured) or half of it (the model, then corrected on the whole tensor): here the reference's blob plus `extra`
// bytes, 0.25 bpp of a 256x256 or a 1024x1024 tensor.
TEST(Encode, TheTargetCountsTheStoredBytesGiven) {
  struct Case {
    std::uint32_t rows, cols;
    std::uint64_t search_max_vectors;  // 262144: the whole tensor is the sample; 65536: 512 rows of 1024
    std::uint64_t extra;
  };
  for (const Case c : {Case{256, 256, 262144, 2048}, Case{50, 520, 262144, 400}, Case{1024, 1024, 65536, 32768}}) {
    const StoredBytes padded = [extra = c.extra](const rans::EncodedTensor& e) {
      return rans::reference_quant_state_bytes(e) + extra;
    };
    const auto w = layer(c.rows, c.cols, 3, true);
    for (double target : {2.0, 4.0, 7.0}) {
      EncodeOptions o;
      o.target_bpp = target;
      o.threads = 2;
      o.search_max_vectors = c.search_max_vectors;
      o.stored_bytes = padded;
      auto e = encode(bytes_of(w), c.rows, c.cols, DType::kF32, o, "w");
      ASSERT_TRUE(e.has_value()) << e.error().to_string();
      const double stored = 8.0 * double(padded(*e)) / (double(c.rows) * c.cols);
      EXPECT_NEAR(stored / target, 1.0, 0.005) << c.rows << "x" << c.cols << " at " << target;
    }
  }
}

TEST(Encode, ThreadCountDoesNotChangeTheStream) {
  const auto w = layer(300, 136, 2, true);
  EncodeOptions o;
  o.target_bpp = 3.3;
  o.threads = 1;
  auto a = encode(bytes_of(w), 300, 136, DType::kF32, o, "w");
  o.threads = 3;
  auto b = encode(bytes_of(w), 300, 136, DType::kF32, o, "w");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->payload, b->payload);
  EXPECT_EQ(a->scales, b->scales);
  EXPECT_EQ(a->states, b->states);
}

// The native profile: the encoder codes row scales already on the profile's grid (rounding them again changes
// nothing); scales that cannot go on it are left and the report says why.
TEST(Encode, TheNativeProfileCodesScalesOnItsGrid) {
  const auto w = layer(300, 136, 5, false);
  EncodeOptions o;
  o.target_bpp = 4.0;
  o.threads = 2;
  o.profile = rans::StreamProfile::kNative;
  EncodeReport report;
  auto native = encode(bytes_of(w), 300, 136, DType::kF32, o, "w", &report);
  ASSERT_TRUE(native) << native.error().to_string();
  EXPECT_EQ(report.profile_note, "");
  std::vector<float> again = native->scales;
  ASSERT_TRUE(rans::round_scales_to_native(again));
  EXPECT_EQ(again, native->scales);
  o.profile = rans::StreamProfile::kReference;
  auto reference = encode(bytes_of(w), 300, 136, DType::kF32, o, "w");
  ASSERT_TRUE(reference);
  EXPECT_NE(reference->scales, native->scales) << "the reference profile keeps its float32 scales";

  // Rows 2^40 apart: no one shift holds both in fp16's normal range.
  auto wide = w;
  for (std::uint32_t c = 0; c < 136; ++c) wide[3 * 136 + c] *= 0x1p-40f;
  o.profile = rans::StreamProfile::kNative;
  auto kept = encode(bytes_of(wide), 300, 136, DType::kF32, o, "w", &report);
  ASSERT_TRUE(kept) << kept.error().to_string();
  EXPECT_NE(report.profile_note.find("kept the reference profile"), std::string::npos) << report.profile_note;
}

TEST(Encode, AcceptsNarrowInputsAndReconstructsInThem) {
  const std::uint32_t rows = 64, cols = 264;
  const auto w = layer(rows, cols, 3, false);
  std::vector<std::uint16_t> bf(w.size());
  std::vector<std::uint8_t> e4(w.size()), i8(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    bf[i] = bf16_from_float(w[i]);
    e4[i] = f8e4m3_from_float(std::clamp(w[i] * 2000.0f, -448.0f, 448.0f));
    i8[i] = std::uint8_t(std::int8_t(std::clamp(std::nearbyint(w[i] * 2000.0f), -127.0f, 127.0f)));
  }
  EncodeOptions o;
  o.target_bpp = 6.0;
  auto a = encode({reinterpret_cast<const std::byte*>(bf.data()), bf.size() * 2}, rows, cols, DType::kBF16, o, "bf");
  auto b = encode({reinterpret_cast<const std::byte*>(e4.data()), e4.size()}, rows, cols, DType::kF8E4M3, o, "e4");
  auto c = encode({reinterpret_cast<const std::byte*>(i8.data()), i8.size()}, rows, cols, DType::kI8, o, "i8");
  ASSERT_TRUE(a.has_value() && b.has_value() && c.has_value());
  EXPECT_EQ(a->dtype, DType::kBF16);
  EXPECT_EQ(c->dtype, DType::kI8);
  std::vector<std::int8_t> out(w.size());
  ASSERT_TRUE(rans::decode(c->view(), "i8", DType::kI8, {reinterpret_cast<std::byte*>(out.data()), out.size()}).has_value());
  double err = 0, energy = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    err += std::pow(double(out[i]) - double(std::int8_t(i8[i])), 2);
    energy += std::pow(double(std::int8_t(i8[i])), 2);
  }
  EXPECT_LT(std::sqrt(err / energy), 0.1);
}

TEST(Encode, RefusesBadInputNamingTheElement) {
  std::vector<float> w(8 * 3, 1.0f);
  w[13] = std::nanf("");
  EncodeOptions o;
  auto e = encode(bytes_of(w), 3, 8, DType::kF32, o, "layer.7");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("row 1, column 5"), std::string::npos) << e.error().message;
  EXPECT_NE(e.error().message.find("layer.7"), std::string::npos);
  EXPECT_FALSE(encode(bytes_of(w), 0, 8, DType::kF32, o).has_value());
  EXPECT_FALSE(encode(bytes_of(w), 2, 8, DType::kF32, o).has_value());  // byte count mismatch
  EXPECT_FALSE(encode(bytes_of(w), 3, 8, DType::kU32, o).has_value());
  o.target_bpp = 12.0;
  w[13] = 0.0f;
  EXPECT_FALSE(encode(bytes_of(w), 3, 8, DType::kF32, o).has_value());
}

// The scale search may run on its sample's rows before the whole tensor's statistics are in (where the sample is
// finite and not all zero); the whole tensor's checks still decide: a non-finite value outside the sample is
// refused, and a sample of zero rows in a tensor that is not all zero is searched after them.
TEST(Encode, TheSampleSearchedFirstDecidesNothingAlone) {
  const std::uint32_t rows = 301, cols = 203;  // 26 vectors a row
  EncodeOptions o;
  o.threads = 2;
  o.search_max_vectors = 26 * 12;
  const auto sample = sample_rows(rows, 208, o.search_max_vectors);
  ASSERT_EQ(sample.size(), 12u);
  std::uint32_t outside = 0;
  while (std::find(sample.begin(), sample.end(), outside) != sample.end()) ++outside;
  for (const std::uint32_t bad_row : {sample[5], outside}) {
    auto w = layer(rows, cols, 4, false);
    w[std::size_t(bad_row) * cols + 17] = INFINITY;
    auto e = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.error().message.find("row " + std::to_string(bad_row) + ", column 17"), std::string::npos)
        << e.error().message;
  }
  auto w = layer(rows, cols, 4, false);
  for (const std::uint32_t r : sample) std::fill_n(w.begin() + std::ptrdiff_t(r) * cols, cols, 0.0f);
  auto e = encode(bytes_of(w), rows, cols, DType::kF32, o, "w");
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  std::vector<float> out(w.size());
  ASSERT_TRUE(rans::decode(e->view(), "w", DType::kF32, {reinterpret_cast<std::byte*>(out.data()), out.size() * 4})
                  .has_value());
  double err = 0, energy = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    err += std::pow(double(out[i]) - double(w[i]), 2);
    energy += std::pow(double(w[i]), 2);
  }
  EXPECT_LT(std::sqrt(err / energy), 0.2);
}

TEST(Encode, HighRatesEscalateProbBits) {
  const std::uint32_t rows = 128, cols = 2048;
  auto w = layer(rows, cols, 4, false);
  for (std::uint32_t r = 0; r < rows; r += 8) {  // a 40-sigma outlier in every 8th row widens the alphabets past 2^12
    double e = 0;
    for (std::uint32_t c = 0; c < cols; ++c) e += double(w[std::size_t(r) * cols + c]) * w[std::size_t(r) * cols + c];
    w[std::size_t(r) * cols + 6] = float(40.0 * std::sqrt(e / cols));  // a z field (column 7 would be m, halved)
  }
  EncodeOptions o;
  o.target_bpp = 11.0;
  EncodeReport rep;
  auto e = encode(bytes_of(w), rows, cols, DType::kF32, o, "w", &rep);
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  EXPECT_GT(rep.prob_bits, 12);  // alphabets of ~2^11 symbols at 11 bpp overflow the starting 12 bits
  EXPECT_EQ(int(e->prob_bits), rep.prob_bits);
  EXPECT_TRUE(rans::validate_stream(e->view(), "w").has_value());
}

TEST(Encode, FixedProbBitsCoarsenTheScaleInsteadOfOverflowing) {
  const auto w = layer(64, 512, 5, true);
  EncodeOptions o;
  o.target_bpp = 10.0;
  o.prob_bits = 9;
  EncodeReport rep;
  auto e = encode(bytes_of(w), 64, 512, DType::kF32, o, "w", &rep);
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  EXPECT_TRUE(rep.coarsened);
  EXPECT_EQ(e->prob_bits, 9u);
  for (const auto& t : e->tables) EXPECT_LE(t.alphabet, 512);
}

TEST(Rdo, RatioLadderIsNestedAndStartsAtOne) {
  EXPECT_EQ(ratio_ladder(1), std::vector<double>{1.0});
  const auto five = ratio_ladder(5);
  // rdo.ratio_ladder(5) of the reference, printed with repr()
  const double want[5] = {0.8366600265340756, 1.0, 1.0973419967718494, 1.2041594578792296, 1.3213747439409014};
  ASSERT_EQ(five.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(five[std::size_t(i)], want[i]) << i;
  EXPECT_DOUBLE_EQ(ratio_ladder(7)[0], 0.7652855797503654);
  const auto three = ratio_ladder(3);
  for (double r : three) EXPECT_NE(std::find(five.begin(), five.end(), r), five.end());
  for (std::size_t i = 1; i < five.size(); ++i) EXPECT_LT(five[i - 1], five[i]);
}

TEST(Search, SampleIsSeededAndBounded) {
  const auto a = sample_rows(10000, 4096, 262144);
  EXPECT_EQ(a.size(), 512u);
  EXPECT_EQ(a, sample_rows(10000, 4096, 262144));
  EXPECT_NE(a, sample_rows(10001, 4096, 262144));
  EXPECT_EQ(sample_rows(100, 64, 262144).size(), 100u);
  EXPECT_EQ(sample_rows(100, 1 << 22, 8).size(), 1u);
}

}  // namespace
}  // namespace epk::rate
