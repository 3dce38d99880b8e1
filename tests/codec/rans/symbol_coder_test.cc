// The intq codes' static-model tiled rANS (codec/rans/symbol_coder.h): round trips on fixed seeds, odd sizes, a single
// repeated symbol, every width 1..8, the fast decoder against the plain reference, and corrupt streams (truncated,
// bad table, bad final state, sizes that do not add up) reported as errors.
#include "codec/rans/symbol_coder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace epk::rans::symbols {
namespace {

std::vector<std::uint8_t> random_symbols(std::size_t n, int bits, std::uint32_t seed, bool skewed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  const int top = (1 << bits) - 1;
  std::normal_distribution<double> g(top / 2.0, std::max(0.5, top / 6.0));
  for (auto& s : v) {
    s = skewed ? static_cast<std::uint8_t>(std::clamp<long>(std::lround(g(rng)), 0, top))
               : static_cast<std::uint8_t>(rng() & static_cast<std::uint32_t>(top));
  }
  return v;
}

void expect_round_trip(const std::vector<std::uint8_t>& v, int bits, std::uint32_t tile, int threads) {
  auto e = encode(v, bits, tile);
  ASSERT_TRUE(e) << e.error().to_string();
  std::vector<std::uint8_t> fast(v.size(), 0xFF), ref(v.size(), 0xFF);
  auto st = decode(view_of(*e), fast, "test", threads);
  ASSERT_TRUE(st) << st.error().to_string();
  auto rs = decode_reference(view_of(*e), ref, "test");
  ASSERT_TRUE(rs) << rs.error().to_string();
  EXPECT_EQ(fast, v);
  EXPECT_EQ(ref, v);
}

TEST(SymbolCoder, RoundTripsEveryWidthOneToEight) {
  for (int bits = 1; bits <= 8; ++bits) {
    SCOPED_TRACE(bits);
    expect_round_trip(random_symbols(10007, bits, 100 + bits, false), bits, 1000, 1);
    expect_round_trip(random_symbols(10007, bits, 200 + bits, true), bits, 1000, 3);
  }
}

TEST(SymbolCoder, OddSizesAndTileEdges) {
  for (std::size_t n : {0u, 1u, 2u, 3u, 999u, 1000u, 1001u, 65537u}) {
    SCOPED_TRACE(n);
    expect_round_trip(random_symbols(n, 4, 7, true), 4, 1000, 2);
  }
  expect_round_trip(random_symbols(5000, 3, 8, true), 3, 1, 4);  // one symbol per tile
}

TEST(SymbolCoder, AllEqualSymbolsTakeOnlyTheStates) {
  for (int bits : {2, 4, 8}) {
    std::vector<std::uint8_t> v(70001, static_cast<std::uint8_t>((1 << bits) - 1));
    auto e = encode(v, bits, 65536);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->freqs.back(), 1u << kDefaultProbBits);
    EXPECT_EQ(e->payload.size(), 8u);  // two tiles, a 4-byte state each, nothing else
    expect_round_trip(v, bits, 65536, 2);
  }
}

TEST(SymbolCoder, SkewedSymbolsCodeNearTheirEntropy) {
  const auto v = random_symbols(1 << 20, 4, 9, true);
  std::vector<double> count(16, 0);
  for (auto s : v) ++count[s];
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / v.size() * std::log2(c / v.size());
  auto e = encode(v, 4);
  ASSERT_TRUE(e);
  const double bits_per_symbol = 8.0 * e->stored_bytes() / v.size();
  EXPECT_LT(bits_per_symbol, h * 1.01 + 0.01) << "entropy " << h;
  EXPECT_LT(bits_per_symbol, 4.0);
}

TEST(SymbolCoder, NormalizedFrequenciesSumExactlyAndKeepRareSymbols) {
  std::vector<std::uint8_t> v(100000, 0);
  v[5] = 255;  // one occurrence in 100000: still gets a frequency
  auto f = normalized_freqs(v, 8, 12);
  ASSERT_TRUE(f);
  std::uint32_t sum = 0;
  for (auto x : *f) sum += x;
  EXPECT_EQ(sum, 4096u);
  EXPECT_GE((*f)[255], 1u);
  EXPECT_EQ((*f)[1], 0u);
  EXPECT_FALSE(encode(std::vector<std::uint8_t>{4}, 2));  // 4 does not fit in 2 bits
}

class SymbolCoderCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    v_ = random_symbols(3001, 5, 11, true);
    auto e = encode(v_, 5, 1000);
    ASSERT_TRUE(e);
    e_ = std::move(*e);
    out_.assign(v_.size(), 0);
  }
  Error both_fail(const StreamView& s) {
    auto a = decode(s, out_, "w.codes", 3);
    auto b = decode_reference(s, out_, "w.codes");
    EXPECT_FALSE(a);
    EXPECT_FALSE(b);
    if (a || b) return make_error(ErrorCode::kInternal, "decoded");
    EXPECT_EQ(a.error().code, b.error().code);
    return a.error();
  }
  std::vector<std::uint8_t> v_, out_;
  Encoded e_;
};

TEST_F(SymbolCoderCorrupt, TruncatedPayloadIsRefused) {
  StreamView s = view_of(e_);
  s.payload = s.payload.first(s.payload.size() - 1);
  EXPECT_EQ(both_fail(s).code, ErrorCode::kBadInput);  // the tile sizes no longer add up
  // A tile that claims fewer bytes, with the next one claiming more: the decoder runs out inside the tile.
  e_.tile_bytes[0] -= 3;
  e_.tile_bytes[1] += 3;
  Error err = both_fail(view_of(e_));
  EXPECT_EQ(err.code, ErrorCode::kCorruptTile);
  EXPECT_NE(err.message.find("tile 0"), std::string::npos) << err.message;
}

TEST_F(SymbolCoderCorrupt, BadTableIsRefused) {
  e_.freqs[3] += 1;  // sum 4097
  Error err = both_fail(view_of(e_));
  EXPECT_EQ(err.code, ErrorCode::kBadInput);
  EXPECT_NE(err.message.find("freqs"), std::string::npos) << err.message;
  e_.freqs[3] -= 1;
  StreamView s = view_of(e_);
  s.freqs = s.freqs.first(s.freqs.size() - 2);  // 31 entries for a 5-bit alphabet
  EXPECT_EQ(both_fail(s).code, ErrorCode::kBadInput);
}

TEST_F(SymbolCoderCorrupt, ChangedTableIsABadFinalStateOrLeftoverBytes) {
  // A valid table (sum kept) that is not the encoder's: the states no longer retrace their path.
  std::size_t hi = 0;
  for (std::size_t i = 0; i < e_.freqs.size(); ++i)
    if (e_.freqs[i] > e_.freqs[hi]) hi = i;
  e_.freqs[hi] -= 7;
  e_.freqs[(hi + 1) % e_.freqs.size()] += 7;
  EXPECT_EQ(both_fail(view_of(e_)).code, ErrorCode::kCorruptTile);
}

TEST_F(SymbolCoderCorrupt, FlippedStateByteIsReported) {
  e_.payload[e_.tile_bytes[0] + 1] ^= 0x40;  // tile 1's initial state
  Error err = both_fail(view_of(e_));
  EXPECT_EQ(err.code, ErrorCode::kCorruptTile);
  EXPECT_NE(err.message.find("tile 1"), std::string::npos) << err.message;
}

TEST_F(SymbolCoderCorrupt, EveryPayloadByteFlipIsCaughtOrDecodesWithoutOverrun) {
  // Most flips are caught by the final state; none may crash or read outside the buffer (ASan).
  std::size_t caught = 0;
  for (std::size_t i = 0; i < e_.payload.size(); ++i) {
    Encoded c = e_;
    c.payload[i] ^= 0x01;
    if (!decode(view_of(c), out_, "w.codes", 1)) ++caught;
  }
  EXPECT_GT(caught, e_.payload.size() * 9 / 10);
}

TEST_F(SymbolCoderCorrupt, BadCountsAndParamsAreRefused) {
  StreamView s = view_of(e_);
  s.tile_bytes = s.tile_bytes.first(s.tile_bytes.size() - 4);
  EXPECT_EQ(both_fail(s).code, ErrorCode::kBadInput);
  s = view_of(e_);
  s.prob_bits = 16;
  EXPECT_EQ(both_fail(s).code, ErrorCode::kBadInput);
  s = view_of(e_);
  s.tile_symbols = 0;
  EXPECT_EQ(both_fail(s).code, ErrorCode::kBadInput);
  e_.tile_bytes[2] = 2;  // shorter than a state
  EXPECT_EQ(both_fail(view_of(e_)).code, ErrorCode::kBadInput);
  std::vector<std::uint8_t> small(10);
  EXPECT_FALSE(decode(view_of(e_), small, "w", 1));
}

}  // namespace
}  // namespace epk::rans::symbols
