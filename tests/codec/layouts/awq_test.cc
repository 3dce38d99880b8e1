#include "codec/layouts/awq.h"

#include <gtest/gtest.h>

#include "codec/layouts/convert.h"
#include "codec/layouts/gptq.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

using namespace testing;

AwqViews views(const std::vector<Tensor>& ts) {
  return AwqViews{view_of(ts, "qweight"), view_of(ts, "qzeros"), view_of(ts, "scales")};
}

TEST(Awq, SlotsHoldColumnsInterleaved) {
  auto t = make_quant_tensor(4, 1, 16, 1);
  for (int n = 0; n < 16; ++n) t.codes[n] = static_cast<std::uint8_t>(n < 8 ? n : 15 - (n - 8));
  t.zeros.assign(16, 8);
  auto ts = write_awq(t);
  ASSERT_TRUE(ts) << ts.error().to_string();
  auto w = words_of_tensor(*find_tensor(*ts, "qweight"));
  // slot i holds column kAwqOrder[i]: columns 0,2,4,6,1,3,5,7 -> nibbles 0,2,4,6,1,3,5,7
  EXPECT_EQ(w[0], 0x75316420u);
  // columns 8..15 hold 15..8: nibbles 15,13,11,9,14,12,10,8
  EXPECT_EQ(w[1], 0x8ACE9BDFu);
  // The reader's view: logical column j sits at shift 4 * {0,4,1,5,2,6,3,7}[j].
  const int shift_slot[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int j = 0; j < 8; ++j) EXPECT_EQ((w[0] >> (4 * shift_slot[j])) & 0xF, static_cast<std::uint32_t>(j));
}

TEST(Awq, RoundTripsEveryProbe) {
  for (auto probe : kAllProbes) {
    auto t = random_quant_tensor(4, 256, 72, 64, 12, false, false, probe);
    auto ts = write_awq(t);
    ASSERT_TRUE(ts) << ts.error().to_string();
    auto back = read_awq(views(*ts), 64);
    ASSERT_TRUE(back) << back.error().to_string();
    expect_same_logical(*back, t);
  }
}

TEST(Awq, RefusesActOrderAndOtherWidths) {
  auto t = random_quant_tensor(4, 128, 16, 32, 2, /*act_order=*/true);
  auto r = write_awq(t);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("sort_groups"), std::string::npos);
  EXPECT_FALSE(write_awq(random_quant_tensor(3, 128, 16, 32, 2)));
  EXPECT_FALSE(write_awq(random_quant_tensor(4, 100, 16, 32, 2)));  // K % G != 0
}

// docs/LAYOUTS.md 6.2: AWQ -> GPTQ repacks that compute izeros - 1 without care turn zero point 0 into 15.
TEST(AwqKnownBugs, ZeroPointZeroSurvivesConversionToGptq) {
  auto t = random_quant_tensor(4, 128, 32, 32, 21);
  t.zeros.assign(t.zeros.size(), 3);
  t.zeros[0] = 0;
  t.zeros[37] = 0;
  auto awq = write_awq(t);
  ASSERT_TRUE(awq);
  auto logical = read_awq(views(*awq), 32);
  ASSERT_TRUE(logical);
  EXPECT_EQ(logical->zeros[0], 0);
  // v1 cannot hold it and says so instead of storing 15 (or the unmasked -1)...
  auto v1 = write_layout(*logical, Layout::kGptqV1);
  ASSERT_FALSE(v1);
  // ...v2 does, and dequantizes identically.
  auto v2 = write_layout(*logical, Layout::kGptqV2);
  ASSERT_TRUE(v2) << v2.error().to_string();
  GptqViews gv{view_of(v2->tensors, "qweight"), view_of(v2->tensors, "qzeros"), view_of(v2->tensors, "scales"),
               view_of(v2->tensors, "g_idx")};
  auto g = read_gptq(gv, 4, 32, GptqZeros::kV2);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->zeros[0], 0);
  EXPECT_EQ(g->zeros[37], 0);
  EXPECT_EQ(dequantize_f32(*g), dequantize_f32(t));
  // The buggy repack's result differs: z 0 -> 15 shifts every weight of that column-group by 15 steps.
  auto buggy = *logical;
  buggy.zeros[0] = 15;
  EXPECT_NE(dequantize_f32(buggy), dequantize_f32(t));
}

}  // namespace
}  // namespace epk::layouts
