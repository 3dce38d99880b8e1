// The calibrated encode's blocked, vectorised kernels against their plain references (codec/rate/cholesky.h,
// codec/rate/feedback_kernels.h, h_times_rows): bit for bit, on fixed seeds, odd sizes (panel and vector tails)
// and edge matrices, for several thread counts, with AVX2 and with the baseline build of each kernel.
#include "codec/rate/cholesky.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/rate/calibration.h"
#include "codec/rate/feedback_kernels.h"
#include "codec/rate/simd.h"

namespace epk::rate {
namespace {

// Restores the kernels' dispatch when a test ends.
struct Avx2Allowed {
  explicit Avx2Allowed(bool allow) { simd::allow_avx2(allow); }
  ~Avx2Allowed() { simd::allow_avx2(true); }
};

enum class Kind { kRandom, kNearSingular, kDiagonal, kIdentity };

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::kRandom: return "random";
    case Kind::kNearSingular: return "near-singular";
    case Kind::kDiagonal: return "diagonal";
    case Kind::kIdentity: return "identity";
  }
  return "";
}

// An n x n symmetric positive definite matrix, row-major, both triangles. Random: B B^T / n + 0.1 I with B n x n.
// Near-singular: B B^T of rank n / 8 (at least 1) plus make_feedback_factor's damping (0.01 * mean diagonal), as a
// calibration over too few tokens gives. Diagonal: log-normal entries. Identity.
std::vector<double> spd(std::size_t n, Kind kind, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> a(n * n, 0.0);
  if (kind == Kind::kIdentity || kind == Kind::kDiagonal) {
    for (std::size_t i = 0; i < n; ++i) a[i * n + i] = kind == Kind::kIdentity ? 1.0 : std::exp(2.0 * nd(rng));
    return a;
  }
  const std::size_t k = kind == Kind::kRandom ? n : std::max<std::size_t>(1, n / 8);
  std::vector<double> b(n * k);
  for (auto& v : b) v = nd(rng);
  double trace = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      double s = 0.0;
      for (std::size_t m = 0; m < k; ++m) s += b[i * k + m] * b[j * k + m];
      a[i * n + j] = a[j * n + i] = s / double(k);
    }
    trace += a[i * n + i];
  }
  const double add = kind == Kind::kRandom ? 0.1 : 0.01 * trace / double(n);
  for (std::size_t i = 0; i < n; ++i) a[i * n + i] += add;
  return a;
}

bool same_bits(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

TEST(Cholesky, BlockedFactorAndInverseEqualThePlainFormsBitForBit) {
  const std::size_t sizes[] = {1, 5, 8, 24, 63, 64, 65, 129, 200, 333, 1000};
  for (const bool avx2 : {true, false}) {
    Avx2Allowed allowed(avx2);
    for (const std::size_t n : sizes) {
      for (const Kind kind : {Kind::kRandom, Kind::kNearSingular, Kind::kDiagonal, Kind::kIdentity}) {
        if (n == 1000 && (kind != Kind::kNearSingular || !avx2)) continue;  // the largest once (its time)
        const std::string what = std::to_string(n) + " " + kind_name(kind) + (avx2 ? " avx2" : " baseline");
        const std::vector<double> a = spd(n, kind, std::uint32_t(17 + n));
        std::vector<double> want = a;
        ASSERT_EQ(cholesky_lower_reference(want.data(), n, 1), n) << what;
        std::vector<double> want_mt(n * n);
        lower_inverse_t_reference(want.data(), n, want_mt.data(), 1);
        // The factor is one: L L^T = A to rounding (a check of the reference, so that equal outputs mean right).
        double worst = 0.0;
        for (std::size_t i = 0; i < n; i += std::max<std::size_t>(1, n / 37)) {
          for (std::size_t j = 0; j <= i; ++j) {
            double s = 0.0;
            for (std::size_t k = 0; k <= j; ++k) s += want[i * n + k] * want[j * n + k];
            worst = std::max(worst, std::fabs(s - a[i * n + j]) / std::sqrt(a[i * n + i] * a[j * n + j]));
          }
        }
        EXPECT_LT(worst, 1e-10) << what;
        for (const int threads : {1, 3}) {
          std::vector<double> got = a;
          ASSERT_EQ(cholesky_lower_blocked(got.data(), n, threads), n) << what;
          EXPECT_TRUE(same_bits(got, want)) << what << ", " << threads << " threads";
          std::vector<double> got_mt(n * n, 7.0);  // stale values: the inverse must write every entry
          lower_inverse_t_blocked(want.data(), n, got_mt.data(), threads);
          EXPECT_TRUE(same_bits(got_mt, want_mt)) << what << ", " << threads << " threads";
        }
      }
    }
  }
}

TEST(Cholesky, BothFormsStopAtTheSameNonPositivePivot) {
  // A positive definite matrix whose entry at (j, j) is cut so that its pivot is negative: both forms return j, in
  // the first panel, at a panel's first column and past one.
  for (const std::size_t j : {3u, 64u, 100u}) {
    const std::size_t n = 150;
    std::vector<double> a = spd(n, Kind::kRandom, 5);
    a[j * n + j] = 1e-3;
    std::vector<double> plain = a, blocked = a;
    EXPECT_EQ(cholesky_lower_reference(plain.data(), n, 2), j);
    EXPECT_EQ(cholesky_lower_blocked(blocked.data(), n, 2), j);
    // A NaN on the diagonal is not positive either.
    a[j * n + j] = std::nan("");
    plain = a;
    blocked = a;
    EXPECT_EQ(cholesky_lower_reference(plain.data(), n, 2), j);
    EXPECT_EQ(cholesky_lower_blocked(blocked.data(), n, 2), j);
  }
}

TEST(FeedbackKernels, UpdateEqualsThePlainLoopBitForBit) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const bool avx2 : {true, false}) {
    Avx2Allowed allowed(avx2);
    // Row counts around the four-row pass, column counts around the vector width.
    for (const std::size_t rows : {1u, 3u, 4u, 5u, 9u, 16u}) {
      for (const std::size_t n : {9u, 16u, 37u, 1000u}) {
        std::vector<float> f(8 * n), w(rows * n), e(rows * 8);
        for (auto& v : f) v = nd(rng);
        for (auto& v : w) v = nd(rng);
        for (auto& v : e) v = nd(rng);
        e[2] = -0.0f;
        e[rows * 8 - 1] = 0.0f;
        for (const std::size_t j0 : {std::size_t(0), std::size_t(1), n / 2, n - 1}) {
          std::vector<float> got = w, want = w;
          std::vector<float*> got_rows(rows), want_rows(rows);
          for (std::size_t r = 0; r < rows; ++r) {
            got_rows[r] = &got[r * n];
            want_rows[r] = &want[r * n];
          }
          feedback_update_rows(got_rows.data(), f.data(), n, e.data(), rows, j0, n);
          feedback_update_rows_reference(want_rows.data(), f.data(), n, e.data(), rows, j0, n);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), rows * n * sizeof(float)), 0) << rows << " " << n << " " << j0;
          for (std::size_t r = 0; r < rows; ++r) {
            EXPECT_NE(std::memcmp(&got[r * n + j0], &w[r * n + j0], (n - j0) * sizeof(float)), 0)
                << "the update changed nothing in row " << r;
          }
        }
      }
    }
  }
}

// The product kernel alone, with more terms than one packed chunk of h holds (256) and every tail of rows
// (groups of 4) and columns (strips of 16 and 8), accumulating into a g that is not zero.
TEST(FeedbackKernels, RowsTimesMatrixEqualsThePlainLoopBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const bool avx2 : {true, false}) {
    Avx2Allowed allowed(avx2);
    for (const std::size_t count : {1u, 255u, 256u, 257u, 600u}) {
      for (const std::size_t rows : {1u, 4u, 6u}) {
        for (const std::size_t len : {5u, 16u, 24u, 37u}) {
          const std::size_t v_stride = count + 1, h_stride = len + 3, g_stride = len + 2;
          std::vector<float> v(rows * v_stride), h(count * h_stride), g(rows * g_stride);
          for (auto& x : v) x = nd(rng) > 1.0f ? 0.0f : nd(rng);
          for (std::size_t r = 0; r < rows; ++r) v[r * v_stride] = 1.0f + float(r);  // every row adds something
          for (auto& x : h) x = nd(rng);
          for (auto& x : g) x = nd(rng);
          std::vector<float> got = g, want = g;
          rows_times_matrix(v.data(), v_stride, rows, h.data(), h_stride, count, got.data(), g_stride, len);
          rows_times_matrix_reference(v.data(), v_stride, rows, h.data(), h_stride, count, want.data(), g_stride,
                                      len);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << count << " " << rows << " " << len;
          EXPECT_NE(std::memcmp(got.data(), g.data(), got.size() * sizeof(float)), 0) << "nothing accumulated";
        }
      }
    }
  }
}

TEST(FeedbackKernels, HTimesRowsEqualsThePlainFormBitForBit) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const bool avx2 : {true, false}) {
    Avx2Allowed allowed(avx2);
    // Column counts across the blocks (256 x 256 of H), the 16- and 8-column strips and scalar tails; row counts
    // across the 4-row groups.
    for (const std::uint32_t n : {7u, 64u, 200u, 257u, 1100u}) {
      std::vector<float> h(std::size_t(n) * n);
      for (std::uint32_t i = 0; i < n; ++i)
        for (std::uint32_t j = 0; j <= i; ++j) h[std::size_t(i) * n + j] = h[std::size_t(j) * n + i] = nd(rng);
      // Signed zeros in H meet the zeros of v: the reference skips those terms, the fast form adds them as +-0.
      for (std::uint32_t i = 0; i < n; i += 3) h[std::size_t(i) * n + (i * 7) % n] = (i % 2) ? -0.0f : 0.0f;
      const HessianView hv{h, n, 1.0};
      for (const std::size_t rows : {3u, 7u, 11u}) {
        const std::size_t stride = n + 3;
        std::vector<float> v(rows * stride);
        for (auto& x : v) x = nd(rng) > 0.5f ? 0.0f : nd(rng);
        for (std::size_t r = 0; r < rows; ++r) v[r * stride + n / 2] = -0.0f;
        // A row of zeros only: its products are exactly +0 in both forms.
        std::fill(v.begin() + std::ptrdiff_t(2 * stride), v.begin() + std::ptrdiff_t(3 * stride), 0.0f);
        std::vector<float> got((rows - 2) * n), want((rows - 2) * n);
        h_times_rows(v.data(), 2, rows, stride, hv, got.data());
        h_times_rows_reference(v.data(), 2, rows, stride, hv, want.data());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << n << " " << rows;
      }
    }
  }
}

}  // namespace
}  // namespace epk::rate
