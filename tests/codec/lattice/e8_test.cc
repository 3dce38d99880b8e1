#include "codec/lattice/e8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codec/lattice/quantize.h"
#include "tests/codec/testing/vector_file.h"

namespace epk::lattice {
namespace {

E8Point nearest_of(std::initializer_list<float> v) {
  float y[8];
  int i = 0;
  for (float f : v) y[i++] = f;
  return nearest_e8(y);
}

double dist2(const float* y, const E8Point& p) {
  double s = 0;
  for (int i = 0; i < 8; ++i) {
    const double d = double(y[i]) - (p.z[i] + 0.5 * p.c);
    s += d * d;
  }
  return s;
}

TEST(NearestD8, RoundsHalfToEven) {
  const float y[8] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 3.5f, 0.0f, 0.0f};
  std::int32_t z[8];
  nearest_d8(y, z);
  // 0, 2, 2, 0, -2, 4: sum 6, even: no parity fix
  const std::int32_t want[8] = {0, 2, 2, 0, -2, 4, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(z[i], want[i]) << i;
}

TEST(NearestD8, ParityFixMovesLargestResidualLowestIndexFirst) {
  // rint gives 1 at index 7 (odd sum); residuals 0.3 at indices 0 and 2 (equal, largest): index 0 moves towards y.
  const float y[8] = {0.3f, 0.0f, 0.3f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};
  std::int32_t z[8];
  nearest_d8(y, z);
  EXPECT_EQ(z[0], 1);
  EXPECT_EQ(z[2], 0);
  EXPECT_EQ(z[7], 1);
}

TEST(NearestD8, ZeroResidualCountsAsPositive) {
  const float y[8] = {0, 0, 0, 0, 0, 0, 0, 1.0f};  // all residuals 0: index 0 moves by +1
  std::int32_t z[8];
  nearest_d8(y, z);
  EXPECT_EQ(z[0], 1);
  EXPECT_EQ(z[7], 1);
}

TEST(NearestE8, ExactCosetTiePicksIntegerCoset) {
  const E8Point p = nearest_of({0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f});
  EXPECT_EQ(p.c, 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p.z[i], 0);
}

TEST(NearestE8, HalfIntegerInputIsItsOwnPoint) {
  // y - 1/2 = (0, -1, 1, -2, 2, -3, 0, -1) has an even sum, so y is a point of D8 + 1/2
  const E8Point p = nearest_of({0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 0.5f, -0.5f});
  EXPECT_EQ(p.c, 1);
  const std::int32_t want[8] = {0, -1, 1, -2, 2, -3, 0, -1};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p.z[i], want[i]) << i;
}

TEST(NearestE8, IsNearestOnRandomInputs) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 4.0f);
  for (int k = 0; k < 5000; ++k) {
    float y[8];
    for (float& v : y) v = n(rng);
    const E8Point p = nearest_e8(y);
    // every neighbour obtained by moving two coordinates by +-1 (a D8 step) is no closer
    const double d = dist2(y, p);
    for (int i = 0; i < 8; ++i) {
      for (int j = i + 1; j < 8; ++j) {
        for (int si : {-1, 1}) {
          for (int sj : {-1, 1}) {
            E8Point q = p;
            q.z[i] += si;
            q.z[j] += sj;
            ASSERT_LE(d, dist2(y, q) + 1e-9);
          }
        }
      }
    }
  }
}

TEST(Fields, RoundTripExactly) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(-300, 300);
  for (int k = 0; k < 20000; ++k) {
    E8Point p;
    p.c = std::uint8_t(k & 1);
    int sum = 0;
    for (int i = 0; i < 7; ++i) {
      p.z[i] = u(rng);
      sum += p.z[i];
    }
    p.z[7] = 2 * u(rng) + (sum & 1);  // keep z in D8
    std::int32_t f[8];
    point_to_fields(p, f);
    const E8Point back = fields_to_point(p.c, f);
    ASSERT_EQ(back.c, p.c);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(back.z[i], p.z[i]);
  }
}

TEST(Fields, MIsFloorForNegativeOddEntries) {
  E8Point p{};
  p.c = 0;
  p.z[0] = -1;  // par = 1
  p.z[7] = -3;  // m = (-3 - 1) / 2 = -2
  std::int32_t f[8];
  point_to_fields(p, f);
  EXPECT_EQ(f[7], -2);
  p.z[7] = 1;  // m = 0
  point_to_fields(p, f);
  EXPECT_EQ(f[7], 0);
}

// The reference's nearest_e8 and point_to_fields on tie-heavy inputs (scripts/testdata/make_entropack_model_vectors.py).
TEST(NearestE8, MatchesReferenceOnTieHeavyInputs) {
  const auto file = epk::testing::read_vector_file(std::string(EPK_SOURCE_DIR) +
                                                   "/tests/data/entropack_units/lattice.safetensors");
  ASSERT_TRUE(file.ok) << file.error;
  const auto y = file.at("y").as<float>();
  const auto point = file.at("point").as<float>();
  const auto c = file.at("c").as<std::int64_t>();
  const auto z = file.at("z").as<std::int64_t>();
  const auto m = file.at("m").as<std::int64_t>();
  const std::size_t n = y.size() / 8;
  ASSERT_GT(n, 500u);
  for (std::size_t v = 0; v < n; ++v) {
    const E8Point p = nearest_e8(&y[v * 8]);
    std::int32_t f[8];
    point_to_fields(p, f);
    ASSERT_EQ(p.c, c[v]) << "vector " << v;
    for (int i = 0; i < 7; ++i) ASSERT_EQ(f[i], z[v * 7 + i]) << "vector " << v << " field " << i;
    ASSERT_EQ(f[7], m[v]) << "vector " << v;
    for (int i = 0; i < 8; ++i) {
      const float got = coordinate(p.z[i], p.c);
      ASSERT_EQ(std::signbit(got), std::signbit(point[v * 8 + i])) << "vector " << v;  // -0 folded to +0
      ASSERT_EQ(got, point[v * 8 + i]) << "vector " << v;
    }
  }
}

}  // namespace
}  // namespace epk::lattice

namespace epk::lattice {
namespace {

void expect_fast_equals_ref(const std::vector<float>& x, float scale) {
  const std::size_t n = x.size() / 8;
  std::vector<std::uint8_t> c1(n), c2(n);
  std::vector<std::int32_t> f1(n * 8), f2(n * 8);
  quantize_vectors(x.data(), n, scale, c1.data(), f1.data());
  quantize_vectors_ref(x.data(), n, scale, c2.data(), f2.data());
  for (std::size_t v = 0; v < n; ++v) {
    ASSERT_EQ(c1[v], c2[v]) << "vector " << v;
    for (int k = 0; k < 8; ++k) ASSERT_EQ(f1[v * 8 + k], f2[v * 8 + k]) << "vector " << v << " field " << k;
  }
}

TEST(QuantizeFast, MatchesReferenceOnTieGrids) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> q(-40, 40);
  std::vector<float> x(8 * 20000);
  for (float& v : x) v = float(q(rng)) / 4.0f;  // quarter grid: ties within and between cosets
  expect_fast_equals_ref(x, 1.0f);
  for (float& v : x) v = float(q(rng)) / 8.0f;
  expect_fast_equals_ref(x, 0.5f);
}

TEST(QuantizeFast, MatchesReferenceOnRandomAndLargeInputs) {
  std::mt19937 rng(22);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(8 * 20000);
  for (float& v : x) v = n(rng);
  expect_fast_equals_ref(x, 0.37f);
  expect_fast_equals_ref(x, 1e-3f);
  // values around and beyond 2^22 after scaling take the fallback path
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 ? 1.0f : 3e6f) * n(rng);
  expect_fast_equals_ref(x, 0.5f);
  expect_fast_equals_ref({-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.2f}, 1.0f);
}

}  // namespace
}  // namespace epk::lattice
