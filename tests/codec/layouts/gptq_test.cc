#include "codec/layouts/gptq.h"

#include <gtest/gtest.h>

#include "codec/layouts/pack_bits.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

using namespace testing;

GptqViews views(const std::vector<Tensor>& ts, bool with_g_idx = true) {
  GptqViews v{view_of(ts, "qweight"), view_of(ts, "qzeros"), view_of(ts, "scales"), std::nullopt};
  if (with_g_idx) v.g_idx = view_of(ts, "g_idx");
  return v;
}

TEST(Gptq, SymmetricFourBitV1ZerosAreSevens) {
  auto t = random_quant_tensor(4, 64, 16, 32, 1, false, /*symmetric=*/true);
  auto ts = write_gptq(t, GptqZeros::kV1);
  ASSERT_TRUE(ts) << ts.error().to_string();
  for (std::uint32_t w : words_of_tensor(*find_tensor(*ts, "qzeros"))) ASSERT_EQ(w, 0x77777777u);
  auto v2 = write_gptq(t, GptqZeros::kV2);
  ASSERT_TRUE(v2);
  for (std::uint32_t w : words_of_tensor(*find_tensor(*v2, "qzeros"))) ASSERT_EQ(w, 0x88888888u);
}

TEST(Gptq, QweightIsTheOracleStreamOfEachColumn) {
  for (int bits : {2, 3, 4, 8}) {
    for (auto probe : kAllProbes) {
      auto t = random_quant_tensor(bits, 96, 32, 32, 3, false, false, probe);
      avoid_zero_zeros(t);
      auto ts = write_gptq(t, GptqZeros::kV1);
      ASSERT_TRUE(ts) << ts.error().to_string();
      const auto qw = words_of_tensor(*find_tensor(*ts, "qweight"));
      const std::size_t nw = packed_words(96, bits);
      ASSERT_EQ(qw.size(), nw * 32);
      std::vector<std::uint8_t> column(96);
      std::vector<std::uint32_t> stream(nw);
      for (std::size_t n = 0; n < 32; ++n) {
        for (std::size_t k = 0; k < 96; ++k) column[k] = t.codes[k * 32 + n];
        ASSERT_TRUE(pack_bits_ref(column, bits, stream));
        for (std::size_t w = 0; w < nw; ++w) ASSERT_EQ(qw[w * 32 + n], stream[w]) << bits << " col " << n;
      }
      // qzeros: row r is the oracle stream of (z - 1) & mask along N.
      const auto qz = words_of_tensor(*find_tensor(*ts, "qzeros"));
      std::vector<std::uint8_t> zrow(32);
      std::vector<std::uint32_t> zstream(packed_words(32, bits));
      for (std::int64_t r = 0; r < t.num_groups; ++r) {
        for (std::size_t n = 0; n < 32; ++n) zrow[n] = static_cast<std::uint8_t>((t.zeros[r * 32 + n] - 1) & ((1 << bits) - 1));
        ASSERT_TRUE(pack_bits_ref(zrow, bits, zstream));
        for (std::size_t w = 0; w < zstream.size(); ++w) ASSERT_EQ(qz[r * zstream.size() + w], zstream[w]);
      }
    }
  }
}

TEST(Gptq, RoundTripsEveryWidthProbeAndZeroConvention) {
  for (int bits : {2, 3, 4, 8}) {
    for (auto probe : kAllProbes) {
      for (auto conv : {GptqZeros::kV1, GptqZeros::kV2}) {
        for (bool act_order : {false, true}) {
          auto t = random_quant_tensor(bits, 128, 64, 32, 9, act_order, false, probe);
          if (conv == GptqZeros::kV1) avoid_zero_zeros(t);
          auto ts = write_gptq(t, conv);
          ASSERT_TRUE(ts) << ts.error().to_string();
          auto back = read_gptq(views(*ts), bits, 32, conv);
          ASSERT_TRUE(back) << back.error().to_string();
          expect_same_logical(*back, t);
          EXPECT_EQ(dequantize_f32(*back), dequantize_f32(t));
        }
      }
    }
  }
}

TEST(Gptq, MissingGidxMeansStaticGroupsAndMinusOneMeansOneGroup) {
  auto t = random_quant_tensor(4, 64, 8, 64, 2);
  auto ts = write_gptq(t, GptqZeros::kV2);
  ASSERT_TRUE(ts);
  auto back = read_gptq(views(*ts, false), 4, -1, GptqZeros::kV2);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->group_size, 64);
  expect_same_logical(*back, t);
}

// docs/LAYOUTS.md 6.1: v1's stored z-1 cannot carry z = 0; the unmasked AutoGPTQ packer writes -1 = 0xFFFFFFFF and
// pollutes every higher slot of the word.
TEST(GptqKnownBugs, V1RefusesZeroPointZeroAndV2KeepsIt) {
  auto t = random_quant_tensor(4, 32, 8, 32, 4);
  t.zeros.assign(t.zeros.size(), 5);
  t.zeros[2] = 0;
  auto v1 = write_gptq(t, GptqZeros::kV1);
  ASSERT_FALSE(v1);
  EXPECT_NE(v1.error().message.find("gptq_v2"), std::string::npos);
  auto v2 = write_gptq(t, GptqZeros::kV2);
  ASSERT_TRUE(v2);
  auto back = read_gptq(views(*v2), 4, 32, GptqZeros::kV2);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->zeros, t.zeros);
  // What the unmasked packer would have stored, and what a v1 reader then sees in the slots above.
  std::uint32_t polluted = 0;
  for (int j = 0; j < 8; ++j) polluted |= static_cast<std::uint32_t>(t.zeros[j] - 1) << (4 * j);
  EXPECT_EQ(polluted >> 8, 0xFFFFFFu);  // slots 2..7 all read back as z = 0, not 5
}

// docs/LAYOUTS.md 6.3: after the +1 the field must be masked: stored all-ones means z = 0, never 2^b.
TEST(GptqKnownBugs, V1ReaderMasksAfterPlusOne) {
  for (int bits : {4, 8}) {
    auto t = random_quant_tensor(bits, 32, 32, 32, 6);
    avoid_zero_zeros(t);
    auto ts = write_gptq(t, GptqZeros::kV1);
    ASSERT_TRUE(ts);
    Tensor* qz = const_cast<Tensor*>(find_tensor(*ts, "qzeros"));
    std::fill(qz->bytes.begin(), qz->bytes.end(), 0xFF);  // int32 -1: also the sign-extension case
    auto back = read_gptq(views(*ts), bits, 32, GptqZeros::kV1);
    ASSERT_TRUE(back) << back.error().to_string();
    for (std::int32_t z : back->zeros) ASSERT_EQ(z, 0) << bits;
  }
}

TEST(Gptq, V1ToV2WordAddMatchesUnpackRepackAndRefusesCarries) {
  for (int bits : {2, 4, 8}) {
    auto t = random_quant_tensor(bits, 64, 64, 16, 8);
    avoid_zero_zeros(t);
    auto v1 = write_gptq(t, GptqZeros::kV1);
    auto v2 = write_gptq(t, GptqZeros::kV2);
    ASSERT_TRUE(v1 && v2);
    auto words = words_of_tensor(*find_tensor(*v1, "qzeros"));
    ASSERT_TRUE(gptq_v1_to_v2_words(words, bits));
    EXPECT_EQ(words, words_of_tensor(*find_tensor(*v2, "qzeros"))) << bits;
  }
  std::vector<std::uint32_t> carry = {0x0000000Fu};
  EXPECT_FALSE(gptq_v1_to_v2_words(carry, 4));
  std::vector<std::uint32_t> three = {0u};
  EXPECT_FALSE(gptq_v1_to_v2_words(three, 3));
}

TEST(Gptq, WriterRefusesUnalignedShapes) {
  auto t = random_quant_tensor(3, 40, 32, 8, 1);  // 40 rows of 3 bits is not whole words
  EXPECT_FALSE(write_gptq(t, GptqZeros::kV2));
  ASSERT_TRUE(pad_to(t, 32, 32));
  EXPECT_TRUE(write_gptq(t, GptqZeros::kV2));
}

}  // namespace
}  // namespace epk::layouts
