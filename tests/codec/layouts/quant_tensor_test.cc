#include "codec/layouts/quant_tensor.h"

#include <gtest/gtest.h>

#include <random>

#include "codec/common/half.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

TEST(QuantTensor, DequantizeAppliesScaleTimesCodeMinusZeroPerGroup) {
  QuantTensor t = make_quant_tensor(4, 3, 2, 2);  // groups: rows {0,1}, {2}
  t.codes = {0, 15, 8, 7, 3, 9};
  t.scales = {0.5f, 2.0f, -1.0f, 0.25f};
  t.zeros = {8, 8, 1, 0};
  ASSERT_TRUE(validate(t));
  EXPECT_EQ(dequantize_f32(t), (std::vector<float>{-4.0f, 14.0f, 0.0f, -2.0f, -2.0f, 2.25f}));
}

TEST(QuantTensor, ValidateNamesTheBrokenField) {
  QuantTensor t = make_quant_tensor(3, 4, 2, 2);
  t.zeros.assign(t.zeros.size(), 4);
  ASSERT_TRUE(validate(t));
  auto bad = t;
  bad.codes[3] = 8;
  EXPECT_FALSE(validate(bad));
  bad = t;
  bad.g_idx[1] = 2;
  auto st = validate(bad);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("g_idx[1]"), std::string::npos);
  bad = t;
  bad.perm = {0, 1, 1, 3};
  EXPECT_FALSE(validate(bad));
  bad = t;
  bad.zeros[0] = 8;
  EXPECT_FALSE(validate(bad));
  bad = t;
  bad.scales.pop_back();
  EXPECT_FALSE(validate(bad));
}

TEST(QuantTensor, Bf16AndF16AreOneRoundingOfTheExactProduct) {
  QuantTensor t = make_quant_tensor(8, 1, 2, 1);
  // scale 1 + 2^-10 (exact in f16, not in bf16) times 255 - 0: exact float32 product 255.249..., one rounding each.
  t.scales = {f16_to_f32(0x3C01), f16_to_f32(0x3C01)};
  t.codes = {255, 1};
  t.zeros = {0, 0};
  auto f32 = dequantize_f32(t);
  EXPECT_EQ(f32[0], 255.0f + 255.0f / 1024.0f);
  EXPECT_EQ(dequantize_bf16(t)[0], f32_to_bf16(f32[0]));
  EXPECT_EQ(dequantize_f16(t)[0], f32_to_f16(f32[0]));
  EXPECT_EQ(bf16_to_f32(dequantize_bf16(t)[0]), 255.0f);  // 255.249: bf16 steps by 1 in [128, 256)
  EXPECT_EQ(dequantize_bf16(t)[1], 0x3F80u);              // 1.0009765625 -> 1.0
}

TEST(QuantTensor, PaddingDequantizesToZeroAndIsSlicedAway) {
  auto t = testing::random_quant_tensor(4, 50, 13, 32, 11);  // K not a multiple of G, odd N
  auto before = dequantize_f32(t);
  ASSERT_TRUE(pad_to(t, 128, 64));
  ASSERT_TRUE(validate(t));
  EXPECT_EQ(t.padded_rows, 128);
  EXPECT_EQ(t.padded_cols, 64);
  EXPECT_EQ(t.num_groups, 4);
  EXPECT_EQ(dequantize_f32(t), before);
  QuantTensor full = t;
  full.rows = full.padded_rows;
  full.cols = full.padded_cols;
  auto all = dequantize_f32(full);
  for (std::int64_t k = 0; k < 128; ++k) {
    for (std::int64_t n = 0; n < 64; ++n) {
      if (k >= 50 || n >= 13) {
        ASSERT_EQ(all[k * 64 + n], 0.0f) << k << "," << n;
      }
    }
  }
}

TEST(QuantTensor, SortGroupsKeepsTheMatmulWithTheReportedPermutation) {
  auto t = testing::random_quant_tensor(4, 256, 24, 32, 5, /*act_order=*/true);
  ASSERT_FALSE(has_static_groups(t));
  auto sorted = sort_groups(t);
  ASSERT_TRUE(sorted);
  EXPECT_TRUE(has_static_groups(*sorted));
  std::mt19937 rng(1);
  std::vector<float> x(256);
  for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  auto y0 = matvec(t, x);
  auto y1 = matvec(*sorted, x);
  for (std::size_t n = 0; n < y0.size(); ++n) EXPECT_NEAR(y0[n], y1[n], 1e-9 * (1 + std::abs(y0[n])));
  // Without the permutation the output is wrong: the check above can fail.
  auto dropped = *sorted;
  dropped.perm.clear();
  auto y2 = matvec(dropped, x);
  double diff = 0;
  for (std::size_t n = 0; n < y0.size(); ++n) diff += std::abs(y0[n] - y2[n]);
  EXPECT_GT(diff, 1.0);
}

}  // namespace
}  // namespace epk::layouts
