#include "codec/layouts/convert.h"

#include <gtest/gtest.h>

#include <random>

#include "codec/layouts/awq.h"
#include "codec/layouts/awq_gemv.h"
#include "codec/layouts/compressed_tensors.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/marlin.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

using namespace testing;

GptqViews gptq_views(const std::vector<Tensor>& ts) {
  return GptqViews{view_of(ts, "qweight"), view_of(ts, "qzeros"), view_of(ts, "scales"), view_of(ts, "g_idx")};
}

std::vector<float> random_x(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 997.0f;
  return x;
}

// GPTQ -> AWQ -> Marlin -> GPTQ, each hop through the logical tensor; the final words equal the first.
void gptq_awq_marlin_gptq(bool act_order, Probe probe) {
  auto t = random_quant_tensor(4, 256, 128, 64, 77, act_order, /*symmetric=*/true, probe);
  auto gptq0 = write_layout(t, Layout::kGptqV1);
  ASSERT_TRUE(gptq0) << gptq0.error().to_string();
  auto l1 = read_gptq(gptq_views(gptq0->tensors), 4, 64, GptqZeros::kV1);
  ASSERT_TRUE(l1);
  auto awq = write_layout(*l1, Layout::kAwq);
  ASSERT_TRUE(awq) << awq.error().to_string();
  EXPECT_EQ(awq->activation_perm.empty(), !act_order);
  auto l2 = read_awq(AwqViews{view_of(awq->tensors, "qweight"), view_of(awq->tensors, "qzeros"),
                              view_of(awq->tensors, "scales")},
                     64);
  ASSERT_TRUE(l2);
  l2->perm = awq->activation_perm;  // AWQ has no perm tensor: it travels beside the checkpoint
  auto marlin = write_layout(*l2, Layout::kMarlin);
  ASSERT_TRUE(marlin) << marlin.error().to_string();
  auto l3 = read_marlin(marlin_views(marlin->tensors), 4, 256, 64);
  ASSERT_TRUE(l3) << l3.error().to_string();
  auto gptq1 = write_layout(*l3, Layout::kGptqV1);
  ASSERT_TRUE(gptq1) << gptq1.error().to_string();
  for (const char* name : {"qweight", "qzeros", "scales", "g_idx"}) {
    EXPECT_EQ(find_tensor(gptq1->tensors, name)->bytes, find_tensor(gptq0->tensors, name)->bytes) << name;
  }
}

TEST(Convert, GptqAwqMarlinGptqIsWordIdentical) {
  for (auto probe : kAllProbes) gptq_awq_marlin_gptq(false, probe);
}

TEST(Convert, GptqAwqMarlinGptqIsWordIdenticalWithActOrder) {
  for (auto probe : kAllProbes) gptq_awq_marlin_gptq(true, probe);
}

TEST(Convert, ActOrderIntoAwqGivesTheSameMatmulWithTheReportedPermutation) {
  auto t = random_quant_tensor(4, 512, 96, 128, 13, /*act_order=*/true);
  auto gptq = write_layout(t, Layout::kGptqV2);
  ASSERT_TRUE(gptq);
  auto src = read_gptq(gptq_views(gptq->tensors), 4, 128, GptqZeros::kV2);
  ASSERT_TRUE(src);
  auto awq = write_layout(*src, Layout::kAwq);
  ASSERT_TRUE(awq) << awq.error().to_string();
  ASSERT_EQ(awq->activation_perm.size(), 512u);
  auto dst = read_awq(AwqViews{view_of(awq->tensors, "qweight"), view_of(awq->tensors, "qzeros"),
                               view_of(awq->tensors, "scales")},
                      128);
  ASSERT_TRUE(dst);
  // The AWQ kernel computes y = x' @ W_awq with x' = x[perm]; the source computes y = x @ W_gptq.
  const auto x = random_x(512, 3);
  std::vector<float> xp(512);
  for (std::size_t j = 0; j < 512; ++j) xp[j] = x[static_cast<std::size_t>(awq->activation_perm[j])];
  const auto y_src = matvec(*src, x);
  const auto y_awq = matvec(*dst, xp);  // dst has no perm: it sees the already-permuted activations
  // Same products, summed in another order: equal up to double rounding; every row is bit-identical.
  for (std::size_t n = 0; n < y_src.size(); ++n) EXPECT_NEAR(y_awq[n], y_src[n], 1e-9 * (1 + std::abs(y_src[n])));
  const auto w_src = dequantize_f32(*src), w_dst = dequantize_f32(*dst);
  for (std::size_t j = 0; j < 512; ++j) {
    const std::size_t k = static_cast<std::size_t>(awq->activation_perm[j]);
    for (std::size_t n = 0; n < 96; ++n) ASSERT_EQ(w_dst[j * 96 + n], w_src[k * 96 + n]);
  }
  // Unpermuted activations give a different output: the test can fail.
  const auto y_wrong = matvec(*dst, x);
  double diff = 0;
  for (std::size_t n = 0; n < y_src.size(); ++n) diff += std::abs(y_wrong[n] - y_src[n]);
  EXPECT_GT(diff, 1.0);
}

// docs/LAYOUTS.md 6.4: with desc_act and row-parallel sharding, each shard's rows must keep their feature indices.
TEST(ConvertKnownBugs, ActOrderShardsKeepTheirPermutation) {
  auto t = random_quant_tensor(4, 256, 64, 32, 41, /*act_order=*/true);
  auto sorted = sort_groups(t);  // e.g. the AWQ/Marlin form: rows reordered, perm set
  ASSERT_TRUE(sorted);
  const auto x = random_x(256, 8);
  const auto full = matvec(t, x);
  std::vector<double> sum(64, 0.0);
  for (std::int64_t s = 0; s < 4; ++s) {
    auto shard = slice_rows(*sorted, 64 * s, 64 * (s + 1));
    ASSERT_TRUE(shard) << shard.error().to_string();
    ASSERT_TRUE(validate(*shard));
    const auto part = matvec(*shard, x);
    for (std::size_t n = 0; n < 64; ++n) sum[n] += part[n];
  }
  for (std::size_t n = 0; n < 64; ++n) EXPECT_NEAR(sum[n], full[n], 1e-9 * (1 + std::abs(full[n])));
  // The bug: slice the rows but feed each shard its contiguous slice of x.
  std::vector<double> bad(64, 0.0);
  for (std::int64_t s = 0; s < 4; ++s) {
    auto shard = slice_rows(*sorted, 64 * s, 64 * (s + 1));
    ASSERT_TRUE(shard);
    for (std::size_t k = 0; k < 64; ++k) shard->perm[k] = static_cast<std::int32_t>(64 * s) + static_cast<std::int32_t>(k);
    const auto part = matvec(*shard, x);
    for (std::size_t n = 0; n < 64; ++n) bad[n] += part[n];
  }
  double diff = 0;
  for (std::size_t n = 0; n < 64; ++n) diff += std::abs(bad[n] - full[n]);
  EXPECT_GT(diff, 1.0);
}

TEST(Convert, OddSizesArePaddedAndSliced) {
  // A vocabulary-like N (not a multiple of 8 or 64) and K not a multiple of the group.
  auto t = random_quant_tensor(4, 200, 1003, 64, 17, false, /*symmetric=*/true);
  const auto w = dequantize_f32(t);
  for (Layout l : {Layout::kGptqV1, Layout::kGptqV2, Layout::kAwq, Layout::kMarlin, Layout::kCompressedTensors,
                   Layout::kAwqGemv}) {
    auto c = write_layout(t, l);
    ASSERT_TRUE(c) << layout_name(l) << ": " << c.error().to_string();
    EXPECT_EQ(c->rows, 200);
    EXPECT_EQ(c->cols, 1003);
    std::int64_t rm = 1, cm = 1;
    layout_alignment(l, t, &rm, &cm);
    EXPECT_EQ(c->padded_rows % rm, 0);
    EXPECT_EQ(c->padded_cols % cm, 0);
    Result<QuantTensor> back = make_error(ErrorCode::kInternal, "unset");
    switch (l) {
      case Layout::kGptqV1: back = read_gptq(gptq_views(c->tensors), 4, 64, GptqZeros::kV1); break;
      case Layout::kGptqV2: back = read_gptq(gptq_views(c->tensors), 4, 64, GptqZeros::kV2); break;
      case Layout::kAwq:
        back = read_awq(AwqViews{view_of(c->tensors, "qweight"), view_of(c->tensors, "qzeros"),
                                 view_of(c->tensors, "scales")},
                        64);
        break;
      case Layout::kMarlin: back = read_marlin(marlin_views(c->tensors), 4, c->padded_rows, 64); break;
      case Layout::kAwqGemv:
        back = read_awq_gemv(AwqGemvViews{view_of(c->tensors, "qweight"), view_of(c->tensors, "qzeros"),
                                          view_of(c->tensors, "scales")},
                             64);
        break;
      case Layout::kCompressedTensors:
        back = read_compressed_tensors(CtViews{view_of(c->tensors, "weight_packed"), view_of(c->tensors, "weight_shape"),
                                               view_of(c->tensors, "weight_scale"), std::nullopt, std::nullopt},
                                       4, 64, CtPacking::kDense);
        break;
    }
    ASSERT_TRUE(back) << layout_name(l) << ": " << back.error().to_string();
    EXPECT_EQ(back->padded_rows, c->padded_rows);
    // The file does not know the logical size (except CT); the caller slices with Converted's rows/cols.
    back->rows = 200;
    back->cols = 1003;
    EXPECT_EQ(dequantize_f32(*back), w) << layout_name(l);
    back->rows = back->padded_rows;
    back->cols = back->padded_cols;
    const auto padded = dequantize_f32(*back);
    for (std::int64_t k = 0; k < back->rows; ++k) {
      for (std::int64_t n = 0; n < back->cols; ++n) {
        if (k >= 200 || n >= 1003) {
          ASSERT_EQ(padded[static_cast<std::size_t>(k * back->cols + n)], 0.0f) << layout_name(l);
        }
      }
    }
  }
}

TEST(Convert, LayoutNamesRoundTrip) {
  for (Layout l : {Layout::kGptqV1, Layout::kGptqV2, Layout::kAwq, Layout::kMarlin, Layout::kCompressedTensors}) {
    EXPECT_EQ(layout_from_name(layout_name(l)), l);
  }
  EXPECT_FALSE(layout_from_name("exl2").has_value());
}

}  // namespace
}  // namespace epk::layouts
