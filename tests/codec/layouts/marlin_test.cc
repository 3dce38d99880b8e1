#include "codec/layouts/marlin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

using namespace testing;

TEST(Marlin, WeightPermStartsAsDocumentedAndIsAPermutation) {
  auto p4 = marlin_weight_perm(4);
  ASSERT_EQ(p4.size(), 1024u);
  EXPECT_EQ((std::vector<int>(p4.begin(), p4.begin() + 4)), (std::vector<int>{0, 128, 8, 136}));
  for (int bits : {4, 8}) {
    auto p = marlin_weight_perm(bits);
    std::sort(p.begin(), p.end());
    std::vector<int> iota(1024);
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(p, iota) << bits;
  }
  auto p8 = marlin_weight_perm(8);
  EXPECT_EQ((std::vector<int>(p8.begin(), p8.begin() + 4)), (std::vector<int>{0, 128, 16, 144}));
  auto s = marlin_scale_perm();
  EXPECT_EQ((std::vector<int>(s.begin(), s.begin() + 9)), (std::vector<int>{0, 8, 16, 24, 32, 40, 48, 56, 1}));
  auto s1 = marlin_scale_perm_single();
  EXPECT_EQ((std::vector<int>(s1.begin(), s1.begin() + 9)), (std::vector<int>{0, 1, 8, 9, 16, 17, 24, 25, 2}));
}

TEST(Marlin, FirstWordPacksThePermutedTileValues) {
  // codes[k][n] = (k + n) % 16 within the first 16x64 chunk: word 0 holds perm entries 0..7 of tile row 0.
  auto t = make_quant_tensor(4, 16, 64, 16);
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 64; ++n) t.codes[k * 64 + n] = static_cast<std::uint8_t>((3 * k + n) % 16);
  }
  t.zeros.assign(t.zeros.size(), 8);
  auto ts = write_marlin(t);
  ASSERT_TRUE(ts) << ts.error().to_string();
  auto w = words_of_tensor(*find_tensor(*ts, "qweight"));
  auto perm = marlin_weight_perm(4);
  std::uint32_t expect = 0;
  for (int i = 0; i < 8; ++i) {
    const int p = perm[i];  // index into tile row 0: tile p/256, row (p%256)/16, col p%16
    const int k = (p % 256) / 16, n = 16 * (p / 256) + p % 16;
    expect |= static_cast<std::uint32_t>(t.codes[k * 64 + n]) << (4 * i);
  }
  EXPECT_EQ(w[0], expect);
}

TEST(Marlin, RoundTripsGroupedChannelwiseAndActOrder) {
  for (int bits : {4, 8}) {
    for (auto probe : kAllProbes) {
      for (std::int64_t group : {std::int64_t{32}, std::int64_t{128}}) {
        for (bool act_order : {false, true}) {
          auto t = random_quant_tensor(bits, 128, 192, group, 31, act_order, /*symmetric=*/true, probe);
          auto ts = write_marlin(t);
          ASSERT_TRUE(ts) << ts.error().to_string();
          EXPECT_EQ(find_tensor(*ts, "qweight")->shape, (std::vector<std::int64_t>{8, 192 * 16 * bits / 32}));
          auto back = read_marlin(marlin_views(*ts), bits, 128, group == 128 ? -1 : group);
          ASSERT_TRUE(back) << back.error().to_string();
          if (has_static_groups(t)) {  // act-order with one group is still static
            expect_same_logical(*back, t);
          } else {
            auto sorted = sort_groups(t);
            ASSERT_TRUE(sorted);
            expect_same_logical(*back, *sorted);
          }
        }
      }
    }
  }
}

TEST(Marlin, RefusesAsymmetricAndBadShapes) {
  auto asym = random_quant_tensor(4, 64, 64, 32, 1);
  auto r = write_marlin(asym);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  EXPECT_FALSE(write_marlin(random_quant_tensor(4, 64, 96, 32, 1, false, true)));  // N % 64
  EXPECT_FALSE(write_marlin(random_quant_tensor(3, 64, 64, 32, 1, false, true)));
}

}  // namespace
}  // namespace epk::layouts
