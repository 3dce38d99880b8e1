// codec/common/checksum.cc built without xxhash's header (EPK_XXHASH_DECLARED: its own declarations of the XXH3
// functions, as the Python package compiles it where libxxhash-dev is absent) against the header's functions called
// directly: every length up to 600 (each of XXH3's size classes and their edges), a long input, and the streaming
// form fed in uneven pieces.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <random>
#include <vector>

#include "codec/common/checksum.h"

namespace epk {
namespace {

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

TEST(ChecksumDeclared, OneShotMatchesTheHeadersFunctionAtEveryShortLength) {
  const std::vector<std::uint8_t> bytes = random_bytes(600, 7);
  for (std::size_t n = 0; n <= bytes.size(); ++n) {
    ASSERT_EQ(xxh3_64({bytes.data(), n}), XXH3_64bits(bytes.data(), n)) << n;
  }
}

TEST(ChecksumDeclared, LongInputAndStreamingInUnevenPieces) {
  const std::vector<std::uint8_t> bytes = random_bytes((1 << 20) + 13, 11);
  const std::uint64_t want = XXH3_64bits(bytes.data(), bytes.size());
  EXPECT_EQ(xxh3_64(bytes), want);
  Xxh3Stream s;
  std::size_t at = 0;
  for (std::size_t piece = 1; at < bytes.size(); piece = piece * 3 + 1) {
    const std::size_t n = std::min(piece, bytes.size() - at);
    s.update({bytes.data() + at, n});
    at += n;
  }
  EXPECT_EQ(s.digest(), want);
  EXPECT_NE(xxh3_64({bytes.data(), bytes.size() - 1}), want);
}

}  // namespace
}  // namespace epk
