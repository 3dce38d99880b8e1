// AutoAWQ GEMV layout: the zeros width rule, round trips through the logical tensor, GEMM <-> GEMV word-identical
// conversions, and what the writer refuses. Reference vectors: reference_vectors_test.cc.
#include "codec/layouts/awq_gemv.h"

#include <gtest/gtest.h>

#include <cmath>

#include "codec/layouts/awq.h"
#include "codec/layouts/convert.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

using testing::find_tensor;
using testing::random_quant_tensor;

AwqGemvViews gemv_views(const std::vector<Tensor>& ts) {
  return {find_tensor(ts, "qweight")->view(), find_tensor(ts, "qzeros")->view(), find_tensor(ts, "scales")->view()};
}
AwqViews gemm_views(const std::vector<Tensor>& ts) {
  return {find_tensor(ts, "qweight")->view(), find_tensor(ts, "qzeros")->view(), find_tensor(ts, "scales")->view()};
}

TEST(AwqGemv, ZerosWidthFollowsCalculateZerosWidth) {
  EXPECT_EQ(awq_gemv_zeros_width(4096, 128), 4);    // 32 groups
  EXPECT_EQ(awq_gemv_zeros_width(4096, 64), 8);     // 64 groups
  EXPECT_EQ(awq_gemv_zeros_width(4096, 32), 16);    // 128 groups
  EXPECT_EQ(awq_gemv_zeros_width(256, 128), 1);     // 2 groups, padded to one word
  EXPECT_EQ(awq_gemv_zeros_width(192, 64), 2);      // 3 groups: 1 word, rounded up to the multiplier 2
  EXPECT_EQ(awq_gemv_zeros_width(128, 32), 4);      // 4 groups: 1 word, rounded up to 4
  EXPECT_EQ(awq_gemv_zeros_width(14336, 256), 7);   // group >= 128: multiplier 1
  EXPECT_EQ(awq_gemv_zeros_width(4096, 4096), 1);   // per channel
  EXPECT_EQ(awq_gemv_zeros_width(4096, 48), 0);     // not a GEMV group size
  EXPECT_EQ(awq_gemv_zeros_width(0, 128), 0);
}

TEST(AwqGemv, RoundTripsEveryProbeAndGroupSize) {
  for (std::int64_t group : {32, 64, 128, 256}) {
    for (auto probe : {testing::Probe::kRandom, testing::Probe::kPattern, testing::Probe::kAllOnes}) {
      SCOPED_TRACE(std::to_string(group) + " probe " + std::to_string(static_cast<int>(probe)));
      const auto seed = 7 + static_cast<std::uint32_t>(group);
      QuantTensor t = random_quant_tensor(4, 512, 40, group, seed, false, false, probe);
      auto w = write_awq_gemv(t);
      ASSERT_TRUE(w) << w.error().to_string();
      EXPECT_EQ(find_tensor(*w, "qweight")->shape, (std::vector<std::int64_t>{40, 64}));
      EXPECT_EQ(find_tensor(*w, "qzeros")->shape[1], awq_gemv_zeros_width(512, group));
      auto back = read_awq_gemv(gemv_views(*w), group);
      ASSERT_TRUE(back) << back.error().to_string();
      testing::expect_same_logical(t, *back);
      auto again = write_awq_gemv(*back);
      ASSERT_TRUE(again);
      for (const char* name : {"qweight", "qzeros", "scales"}) {
        EXPECT_EQ(find_tensor(*again, name)->bytes, find_tensor(*w, name)->bytes) << name;
      }
    }
  }
}

TEST(AwqGemv, GemmToGemvToGemmIsWordIdentical) {
  QuantTensor t = random_quant_tensor(4, 384, 72, 64, 91);
  auto gemm = write_awq(t);
  ASSERT_TRUE(gemm);
  auto from_gemm = read_awq(gemm_views(*gemm), 64);
  ASSERT_TRUE(from_gemm);
  auto gemv = write_awq_gemv(*from_gemm);
  ASSERT_TRUE(gemv) << gemv.error().to_string();
  auto from_gemv = read_awq_gemv(gemv_views(*gemv), 64);
  ASSERT_TRUE(from_gemv);
  auto gemm2 = write_awq(*from_gemv);
  ASSERT_TRUE(gemm2);
  for (const char* name : {"qweight", "qzeros", "scales"}) {
    EXPECT_EQ(find_tensor(*gemm2, name)->bytes, find_tensor(*gemm, name)->bytes) << name;
  }
}

TEST(AwqGemv, WriteLayoutPadsAndReportsTheActOrderPermutation) {
  // 96 x 45: N padded to 48; act-order groups sorted, the activation permutation reported.
  QuantTensor t = random_quant_tensor(4, 96, 45, 32, 5, /*act_order=*/true);
  auto c = write_layout(t, Layout::kAwqGemv);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->padded_cols, 48);
  EXPECT_EQ(c->activation_perm.size(), 96u);
  auto back = read_awq_gemv(gemv_views(c->tensors), 32);
  ASSERT_TRUE(back);
  // The matmul of the converted layer with x[perm] equals the source's with x.
  std::vector<float> x(96);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  back->perm = c->activation_perm;
  const auto want = matvec(t, x), got = matvec(*back, x);
  ASSERT_EQ(got.size(), 48u);
  for (std::size_t n = 0; n < want.size(); ++n) EXPECT_NEAR(got[n], want[n], 1e-9 * (1 + std::abs(want[n]))) << n;
  for (std::size_t n = want.size(); n < got.size(); ++n) EXPECT_EQ(got[n], 0.0) << n;  // padded columns
  EXPECT_EQ(layout_from_name("awq-gemv"), Layout::kAwqGemv);
  EXPECT_EQ(layout_name(Layout::kAwqGemv), "awq-gemv");
}

TEST(AwqGemv, WriterRefusesWhatTheLayoutCannotHold) {
  EXPECT_FALSE(write_awq_gemv(random_quant_tensor(3, 96, 32, 32, 1)));                   // 3-bit
  EXPECT_FALSE(write_awq_gemv(random_quant_tensor(4, 96, 32, 48, 2)));                   // group 48
  EXPECT_FALSE(write_awq_gemv(random_quant_tensor(4, 96, 32, 32, 3, /*act_order=*/true)));  // scattered groups
  EXPECT_FALSE(write_awq_gemv(random_quant_tensor(4, 96, 36, 32, 4)));                   // N % 8
}

}  // namespace
}  // namespace epk::layouts
