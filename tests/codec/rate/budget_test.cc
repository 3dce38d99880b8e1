#include "codec/rate/budget.h"

#include <gtest/gtest.h>

#include <cmath>

namespace epk::rate {
namespace {

double spent(const std::vector<LayerStats>& l, const std::vector<double>& r) {
  double bits = 0, n = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    bits += r[i] * double(l[i].weights);
    n += double(l[i].weights);
  }
  return bits / n;
}

TEST(Budget, EqualLayersGetTheBudget) {
  const std::vector<LayerStats> l = {{1000, 10.0}, {1000, 10.0}, {1000, 10.0}};
  auto r = allocate_budget(l, {4.0, 1.0, 8.0});
  ASSERT_TRUE(r.has_value());
  for (double v : *r) EXPECT_NEAR(v, 4.0, 1e-9);
}

TEST(Budget, LargerWeightsGetHalfABitPerDoublingOfRms) {
  // mean squares 1 and 4: rms doubles, so one more bit, and the weighted mean stays at the budget
  const std::vector<LayerStats> l = {{3000, 3000.0}, {1000, 4000.0}};
  auto r = allocate_budget(l, {4.0, 1.0, 8.0});
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR((*r)[1] - (*r)[0], 1.0, 1e-9);
  EXPECT_NEAR(spent(l, *r), 4.0, 1e-9);
}

TEST(Budget, ModelledErrorIsNoWorseThanUniform) {
  const std::vector<LayerStats> l = {{4096, 4096 * 1e-4}, {1 << 20, (1 << 20) * 4e-4}, {65536, 65536 * 2.5e-3}};
  auto r = allocate_budget(l, {3.5, 1.0, 8.0});
  ASSERT_TRUE(r.has_value());
  auto err = [&](const std::vector<double>& rates) {
    double e = 0;
    for (std::size_t i = 0; i < l.size(); ++i) e += l[i].energy * std::pow(2.0, -2.0 * rates[i]);
    return e;
  };
  EXPECT_LT(err(*r), err({3.5, 3.5, 3.5}));
  EXPECT_NEAR(spent(l, *r), 3.5, 1e-9);
}

TEST(Budget, ClampsAndStillSpendsTheBudget) {
  const std::vector<LayerStats> l = {{1000, 1e-12}, {1000, 1000.0}, {1000, 1e6}};
  auto r = allocate_budget(l, {3.0, 2.0, 5.0});
  ASSERT_TRUE(r.has_value());
  for (double v : *r) {
    EXPECT_GE(v, 2.0);
    EXPECT_LE(v, 5.0);
  }
  EXPECT_NEAR(spent(l, *r), 3.0, 1e-9);
}

TEST(Budget, RefusesBadInput) {
  EXPECT_FALSE(allocate_budget({}, {}).has_value());
  EXPECT_FALSE(allocate_budget({{0, 0.0}}, {}).has_value());
  EXPECT_FALSE(allocate_budget({{10, 1.0}}, {9.0, 1.0, 8.0}).has_value());
  EXPECT_FALSE(allocate_budget({{10, 1.0}}, {4.0, 5.0, 3.0}).has_value());
}

TEST(Budget, ALayerWhoseErrorCostsMoreGetsMoreBits) {
  // Identical weights; the second layer's output error is 16x its weight error, the first's 1/16: four gain
  // doublings apart, so two bits apart, around the budget.
  const std::vector<LayerStats> l = {{1000, 10.0, 1.0 / 16}, {1000, 10.0, 16.0}};
  auto r = allocate_budget(l, {4.0, 1.0, 8.0});
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR((*r)[0], 2.0, 1e-9);
  EXPECT_NEAR((*r)[1], 6.0, 1e-9);
  EXPECT_NEAR(spent(l, *r), 4.0, 1e-9);
}

TEST(Budget, EqualGainsLeaveTheWeightErrorAllocation) {
  // A gain of exactly 1 is the weight-error model bit for bit; one common gain only shifts c, so the rates move by
  // the bisection's rounding at most.
  const std::vector<LayerStats> plain = {{4096, 0.4}, {1 << 20, 400.0}, {65536, 160.0}};
  auto base = allocate_budget(plain, {3.5, 1.0, 8.0});
  ASSERT_TRUE(base.has_value());
  for (double gain : {1.0, 1.01, 1e-3, 250.0}) {
    std::vector<LayerStats> l = plain;
    for (auto& s : l) s.gain = gain;
    auto r = allocate_budget(l, {3.5, 1.0, 8.0});
    ASSERT_TRUE(r.has_value());
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (gain == 1.0) {
        EXPECT_EQ((*r)[i], (*base)[i]);
      } else {
        EXPECT_NEAR((*r)[i], (*base)[i], 1e-9) << "gain " << gain;
      }
    }
  }
}

TEST(Budget, RefusesABadGain) {
  EXPECT_FALSE(allocate_budget({{10, 1.0, -1.0}}, {}).has_value());
  EXPECT_FALSE(allocate_budget({{10, 1.0, std::nan("")}}, {}).has_value());
  EXPECT_FALSE(allocate_budget({{10, 1.0, INFINITY}}, {}).has_value());
  EXPECT_TRUE(allocate_budget({{10, 1.0, 0.0}, {10, 1.0, 1.0}}, {}).has_value());
}

}  // namespace
}  // namespace epk::rate
