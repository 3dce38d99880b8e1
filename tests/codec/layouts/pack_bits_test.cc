#include "codec/layouts/pack_bits.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/codec/layouts/probes.h"

namespace epk::layouts {
namespace {

using testing::kAllProbes;
using testing::make_probe;
using testing::probe_name;

constexpr std::size_t kLengths[] = {1, 7, 31, 32, 33, 95, 96, 97, 1001, 4099};

std::vector<std::uint32_t> pack_ref(const std::vector<std::uint8_t>& codes, int bits) {
  std::vector<std::uint32_t> w(packed_words(codes.size(), bits), 0xDEADBEEFu);
  EXPECT_TRUE(pack_bits_ref(codes, bits, w));
  return w;
}

TEST(PackBitsRef, ThreeBitStraddlesWordsAtElements10And21) {
  std::vector<std::uint8_t> codes(32, 0);
  codes[10] = 7;  // bits 30..32: word0 bits 30-31, word1 bit 0
  EXPECT_EQ(pack_ref(codes, 3), (std::vector<std::uint32_t>{0xC0000000u, 0x00000001u, 0u}));
  codes[10] = 0;
  codes[21] = 5;  // bits 63..65: word1 bit 31 (=1), word2 bits 0-1 (=0b10)
  EXPECT_EQ(pack_ref(codes, 3), (std::vector<std::uint32_t>{0u, 0x80000000u, 0x2u}));
}

TEST(PackBitsRef, FourBitSevensAreTheSymmetricGptqZeroWord) {
  std::vector<std::uint8_t> codes(16, 7);
  EXPECT_EQ(pack_ref(codes, 4), (std::vector<std::uint32_t>{0x77777777u, 0x77777777u}));
}

TEST(PackBitsRef, ElementIsLsbFirst) {
  std::vector<std::uint8_t> codes = {1, 2, 3};
  EXPECT_EQ(pack_ref(codes, 8), (std::vector<std::uint32_t>{0x00030201u}));
  EXPECT_EQ(pack_ref(codes, 2), (std::vector<std::uint32_t>{0b111001u}));
  EXPECT_EQ(pack_ref(std::vector<std::uint8_t>{1, 0, 1}, 1), (std::vector<std::uint32_t>{0b101u}));
}

TEST(PackBitsRef, PartialLastWordHasZeroHighBits) {
  std::vector<std::uint8_t> codes(11, 7);  // 33 bits: word1 holds one bit
  EXPECT_EQ(pack_ref(codes, 3), (std::vector<std::uint32_t>{0xFFFFFFFFu, 0x1u}));
}

TEST(PackBitsRef, RoundTripsEveryWidthProbeAndLength) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (auto probe : kAllProbes) {
      for (std::size_t n : kLengths) {
        auto codes = make_probe(probe, 1, n, bits, 17);
        auto words = pack_ref(codes, bits);
        std::vector<std::uint8_t> back(n, 0xFF);
        ASSERT_TRUE(unpack_bits_ref(words, bits, back));
        ASSERT_EQ(back, codes) << "bits " << bits << " " << probe_name(probe) << " n " << n;
      }
    }
  }
}

TEST(PackBitsFast, MatchesReferenceBitForBit) {
  for (int bits = 1; bits <= 8; ++bits) {  // 2, 3, 4, 8 are the fast paths; the rest must fall back correctly
    for (auto probe : kAllProbes) {
      for (std::size_t n : kLengths) {
        auto codes = make_probe(probe, 1, n, bits, 5);
        auto expect = pack_ref(codes, bits);
        std::vector<std::uint32_t> got(expect.size(), 0xDEADBEEFu);
        ASSERT_TRUE(pack_bits(codes, bits, got));
        ASSERT_EQ(got, expect) << "bits " << bits << " " << probe_name(probe) << " n " << n;
      }
    }
  }
}

TEST(PackBitsFast, UnpackMatchesReferenceOnArbitraryWords) {
  // Random words, not only words our packer produced: every bit pattern must unpack as the oracle does.
  std::mt19937 rng(99);
  for (int bits = 1; bits <= 8; ++bits) {
    for (std::size_t n : kLengths) {
      std::vector<std::uint32_t> words(packed_words(n, bits));
      for (auto& w : words) w = rng();
      std::vector<std::uint8_t> expect(n), got(n, 0xFF);
      ASSERT_TRUE(unpack_bits_ref(words, bits, expect));
      ASSERT_TRUE(unpack_bits(words, bits, got));
      ASSERT_EQ(got, expect) << "bits " << bits << " n " << n;
    }
  }
}

TEST(PackBits, RejectsCodeWiderThanWidth) {
  std::vector<std::uint8_t> codes(8, 1);
  codes[5] = 16;
  std::vector<std::uint32_t> words(1);
  auto st = pack_bits(codes, 4, words);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("index 5"), std::string::npos) << st.error().message;
  EXPECT_FALSE(pack_bits_ref(codes, 4, words));
}

TEST(PackBits, RejectsWrongWordCountAndWidth) {
  std::vector<std::uint8_t> codes(9, 1);
  std::vector<std::uint32_t> words(1);  // 9 * 4 bits need 2 words
  EXPECT_FALSE(pack_bits(codes, 4, words));
  EXPECT_FALSE(unpack_bits(words, 4, codes));
  std::vector<std::uint32_t> two(2);
  EXPECT_FALSE(pack_bits(codes, 0, two));
  EXPECT_FALSE(pack_bits(codes, 9, two));
}

TEST(PackRows, FastMatchesReferenceAndRoundTrips) {
  constexpr std::size_t kShapes[][2] = {{32, 1}, {64, 7}, {96, 33}, {33, 5}, {7, 65}, {256, 19}};
  for (int bits = 1; bits <= 8; ++bits) {
    for (auto probe : kAllProbes) {
      for (auto [rows, cols] : kShapes) {
        auto codes = make_probe(probe, rows, cols, bits, 3);
        std::vector<std::uint32_t> expect(packed_words(rows, bits) * cols), got(expect.size(), 0xDEADBEEFu);
        ASSERT_TRUE(pack_rows_ref(codes, rows, cols, bits, expect));
        ASSERT_TRUE(pack_rows(codes, rows, cols, bits, got));
        ASSERT_EQ(got, expect) << "bits " << bits << " " << probe_name(probe) << " " << rows << "x" << cols;
        std::vector<std::uint8_t> back(codes.size(), 0xFF), back_ref(codes.size(), 0xFF);
        ASSERT_TRUE(unpack_rows(got, rows, cols, bits, back));
        ASSERT_TRUE(unpack_rows_ref(got, rows, cols, bits, back_ref));
        ASSERT_EQ(back, codes);
        ASSERT_EQ(back_ref, codes);
      }
    }
  }
}

TEST(PackRows, ColumnStreamIsAlongRows) {
  // [16, 2] 4-bit: column 0 is rows 0..7 in word row 0 and rows 8..15 in word row 1.
  std::vector<std::uint8_t> codes(32, 0);
  for (int r = 0; r < 16; ++r) codes[r * 2] = static_cast<std::uint8_t>(r);
  std::vector<std::uint32_t> words(4);
  ASSERT_TRUE(pack_rows(codes, 16, 2, 4, words));
  EXPECT_EQ(words, (std::vector<std::uint32_t>{0x76543210u, 0u, 0xFEDCBA98u, 0u}));
}

}  // namespace
}  // namespace epk::layouts
