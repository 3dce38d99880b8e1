#include "codec/rate/cholesky.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "codec/common/parallel.h"
#include "codec/rate/simd.h"

namespace epk::rate {
namespace {

using simd::v4d;

// sum a[i] * b[i] with four accumulators (a fixed order: the result does not depend on the caller's threads).
double dot(const double* a, const double* b, std::size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// dot(x, y, end) given s, the four accumulators of dot's loop over k < k0 (k0 a multiple of 4, k0 <= end): the
// rest of dot's loop, its tail and its sum, in dot's order (lane l of s is dot's s_l).
EPK_SIMD_INLINE double finish_dot(v4d s, const double* x, const double* y, std::size_t k0, std::size_t end) {
  std::size_t k = k0;
  for (; k + 4 <= end; k += 4) s += simd::load4(x + k) * simd::load4(y + k);
  double s0 = s[0];
  for (; k < end; ++k) s0 += x[k] * y[k];
  return (s0 + s[1]) + (s[2] + s[3]);
}

// lanes[r * C + c] += the four accumulators of dot(x[r], y[c]) over k in [k0, k1) (whole 4-steps).
template <int R, int C>
EPK_SIMD_INLINE void lanes_tile(const double* const* x, const double* const* y, std::size_t k0, std::size_t k1,
                                double* lanes, std::size_t lanes_stride) {
  v4d s[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) s[r][c] = simd::load4(lanes + 4 * (r * lanes_stride + c));
  for (std::size_t k = k0; k < k1; k += 4) {
    v4d xv[R], yv[C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = simd::load4(x[r] + k);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) yv[c] = simd::load4(y[c] + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) s[r][c] += xv[r] * yv[c];
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) simd::store4(lanes + 4 * (r * lanes_stride + c), s[r][c]);
}

// Rows r0..r1 (all below the panel p0..p1) of the factor: the dot products' accumulators over k < p0 against the
// panel's rows (k in chunks, so that the panel's chunk stays in cache across the rows), then each row's panel
// entries in column order. lanes: (r1 - r0) x (p1 - p0) x 4 doubles of scratch (unaligned: loaded lane-wise).
EPK_SIMD_INLINE void panel_rows_body(double* a, std::size_t n, std::size_t r0, std::size_t r1, std::size_t p0,
                                     std::size_t p1, double* lanes) {
  constexpr std::size_t kChunk = 256;
  const std::size_t w = p1 - p0, rows = r1 - r0;
  std::fill(lanes, lanes + 4 * rows * w, 0.0);
  for (std::size_t k0 = 0; k0 < p0; k0 += kChunk) {
    const std::size_t k1 = std::min(p0, k0 + kChunk);
    std::size_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      const double* x[2] = {a + (r0 + r) * n, a + (r0 + r + 1) * n};
      std::size_t c = 0;
      for (; c + 4 <= w; c += 4) {
        const double* y[4] = {a + (p0 + c) * n, a + (p0 + c + 1) * n, a + (p0 + c + 2) * n, a + (p0 + c + 3) * n};
        lanes_tile<2, 4>(x, y, k0, k1, lanes + 4 * (r * w + c), w);
      }
      for (; c < w; ++c) {
        const double* y[1] = {a + (p0 + c) * n};
        lanes_tile<2, 1>(x, y, k0, k1, lanes + 4 * (r * w + c), w);
      }
    }
    for (; r < rows; ++r) {
      const double* x[1] = {a + (r0 + r) * n};
      for (std::size_t c = 0; c < w; ++c) {
        const double* y[1] = {a + (p0 + c) * n};
        lanes_tile<1, 1>(x, y, k0, k1, lanes + 4 * (r * w + c), w);
      }
    }
  }
  for (std::size_t r = 0; r < rows; ++r) {
    double* li = a + (r0 + r) * n;
    for (std::size_t j = p0; j < p1; ++j) {
      const double* lj = a + j * n;
      li[j] = (li[j] - finish_dot(simd::load4(lanes + 4 * (r * w + (j - p0))), li, lj, p0, j)) / lj[j];
    }
  }
}

void panel_rows_baseline(double* a, std::size_t n, std::size_t r0, std::size_t r1, std::size_t p0, std::size_t p1,
                         double* lanes) {
  panel_rows_body(a, n, r0, r1, p0, p1, lanes);
}
#if EPK_SIMD_DISPATCH
EPK_TARGET_AVX2 void panel_rows_avx2(double* a, std::size_t n, std::size_t r0, std::size_t r1, std::size_t p0,
                                     std::size_t p1, double* lanes) {
  panel_rows_body(a, n, r0, r1, p0, p1, lanes);
}
#endif
void panel_rows(double* a, std::size_t n, std::size_t r0, std::size_t r1, std::size_t p0, std::size_t p1,
                double* lanes) {
#if EPK_SIMD_DISPATCH
  if (simd::have_avx2()) return panel_rows_avx2(a, n, r0, r1, p0, p1, lanes);
#endif
  panel_rows_baseline(a, n, r0, r1, p0, p1, lanes);
}

// Row i of an inverse group from its accumulators: M_ij = (acc + 1 on the diagonal) / L_ii, 0 above the diagonal.
EPK_SIMD_INLINE void inverse_finalize(const double* l, std::size_t n, std::size_t j0, std::size_t i, v4d lo, v4d hi,
                                      double* buf) {
  const double inv = 1.0 / l[i * n + i];
  double* out = buf + (i - j0) * 8;
  for (std::size_t c = 0; c < 8; ++c) {
    const double acc = c < 4 ? lo[c] : hi[c - 4];
    const std::size_t j = j0 + c;
    out[c] = j > i ? 0.0 : (j == i ? acc + 1.0 : acc) * inv;
  }
}

// Columns j0..j0+8 of M = L^-1 (the ones past n are zero) into buf (rows j0..n, 8 per row: buf[(i - j0) * 8 + c] =
// M_i,j0+c), four rows at a time: their subtractions over k < i0 run side by side (independent chains), then
// the rows' own triangle in order. For column j = j0 + c the terms k < j meet M_kj = +0, which leaves the
// accumulator at +0 (+0 - (+-0) = +0), so each entry is the reference's sum from k = j on.
EPK_SIMD_INLINE void inverse_group_body(const double* l, std::size_t n, std::size_t j0, double* buf) {
  constexpr std::size_t W = 8;
  std::size_t i0 = j0;
  for (; i0 + 4 <= n; i0 += 4) {
    v4d lo[4], hi[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) lo[r] = hi[r] = v4d{0.0, 0.0, 0.0, 0.0};
    const double* li[4] = {l + i0 * n, l + (i0 + 1) * n, l + (i0 + 2) * n, l + (i0 + 3) * n};
    for (std::size_t k = j0; k < i0; ++k) {
      const v4d mlo = simd::load4(buf + (k - j0) * W), mhi = simd::load4(buf + (k - j0) * W + 4);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const double b = li[r][k];
        lo[r] -= b * mlo;
        hi[r] -= b * mhi;
      }
    }
    for (int r = 0; r < 4; ++r) {
      for (std::size_t k = i0; k < i0 + r; ++k) {
        const double b = li[r][k];
        lo[r] -= b * simd::load4(buf + (k - j0) * W);
        hi[r] -= b * simd::load4(buf + (k - j0) * W + 4);
      }
      inverse_finalize(l, n, j0, i0 + r, lo[r], hi[r], buf);
    }
  }
  for (; i0 < n; ++i0) {
    v4d lo = {0.0, 0.0, 0.0, 0.0}, hi = lo;
    const double* li = l + i0 * n;
    for (std::size_t k = j0; k < i0; ++k) {
      lo -= li[k] * simd::load4(buf + (k - j0) * W);
      hi -= li[k] * simd::load4(buf + (k - j0) * W + 4);
    }
    inverse_finalize(l, n, j0, i0, lo, hi, buf);
  }
}

void inverse_group_baseline(const double* l, std::size_t n, std::size_t j0, double* buf) {
  inverse_group_body(l, n, j0, buf);
}
#if EPK_SIMD_DISPATCH
EPK_TARGET_AVX2 void inverse_group_avx2(const double* l, std::size_t n, std::size_t j0, double* buf) {
  inverse_group_body(l, n, j0, buf);
}
#endif
void inverse_group(const double* l, std::size_t n, std::size_t j0, double* buf) {
#if EPK_SIMD_DISPATCH
  if (simd::have_avx2()) return inverse_group_avx2(l, n, j0, buf);
#endif
  inverse_group_baseline(l, n, j0, buf);
}

}  // namespace

std::size_t cholesky_lower_reference(double* a, std::size_t n, int threads) {
  // Column by column (Cholesky-Crout): column j's diagonal, then every row below it. The rows of one column are
  // independent, so they run on `threads`; each entry is the same dot product in the same order whatever the split.
  for (std::size_t j = 0; j < n; ++j) {
    double* lj = &a[j * n];
    const double d = lj[j] - dot(lj, lj, j);
    if (!(d > 0.0)) return j;
    lj[j] = std::sqrt(d);
    const std::size_t below = n - j - 1;
    // Threads only where the column is worth a fork (a few hundred thousand multiply-adds).
    const int t = below * j >= (std::size_t{1} << 18) ? threads : 1;
    parallel_for_blocks(below, 64, t, [&](std::size_t b0, std::size_t b1) {
      for (std::size_t i = j + 1 + b0; i < j + 1 + b1; ++i) {
        double* li = &a[i * n];
        li[j] = (li[j] - dot(li, lj, j)) / lj[j];
      }
    });
  }
  return n;
}

std::size_t cholesky_lower_blocked(double* a, std::size_t n, int threads) {
  constexpr std::size_t kRowBlock = 16;
  std::vector<double> diag(4 * kCholeskyPanel * kCholeskyPanel);  // four accumulators per entry
  for (std::size_t p0 = 0; p0 < n; p0 += kCholeskyPanel) {
    const std::size_t p1 = std::min(n, p0 + kCholeskyPanel), w = p1 - p0;
    // The panel's diagonal block, one thread: accumulators over k < p0, then Crout's column order inside it
    // (the diagonal entry, then the rows below it in the block).
    for (std::size_t i = p0; i < p1; ++i) {
      for (std::size_t j = p0; j <= i; ++j) {
        v4d s = {0.0, 0.0, 0.0, 0.0};
        const double *x = a + i * n, *y = a + j * n;
        for (std::size_t k = 0; k < p0; k += 4) s += simd::load4(x + k) * simd::load4(y + k);
        simd::store4(&diag[4 * ((i - p0) * w + (j - p0))], s);
      }
    }
    for (std::size_t j = p0; j < p1; ++j) {
      double* lj = a + j * n;
      const double d = lj[j] - finish_dot(simd::load4(&diag[4 * ((j - p0) * w + (j - p0))]), lj, lj, p0, j);
      if (!(d > 0.0)) return j;
      lj[j] = std::sqrt(d);
      for (std::size_t i = j + 1; i < p1; ++i) {
        double* li = a + i * n;
        li[j] = (li[j] - finish_dot(simd::load4(&diag[4 * ((i - p0) * w + (j - p0))]), li, lj, p0, j)) / lj[j];
      }
    }
    // The rows below the panel: independent given the diagonal block, split over the threads.
    if (p1 < n) {
      const int t = (n - p1) * p1 >= (std::size_t{1} << 14) ? threads : 1;
      parallel_for_blocks(n - p1, kRowBlock, t, [&](std::size_t b0, std::size_t b1) {
        std::vector<double> lanes(4 * kRowBlock * kCholeskyPanel);
        panel_rows(a, n, p1 + b0, p1 + b1, p0, p1, lanes.data());
      });
    }
  }
  return n;
}

void lower_inverse_t_reference(const double* l, std::size_t n, double* mt, int threads) {
  // Columns are independent, so groups of kColumns run on `threads` (the group's columns interleaved for the
  // multiply-add chains' latency); each entry's arithmetic is fixed, so M does not depend on the thread count.
  constexpr std::size_t kColumns = 4;
  std::fill(mt, mt + n * n, 0.0);
  parallel_for_blocks((n + kColumns - 1) / kColumns, 1, threads, [&](std::size_t g0, std::size_t g1) {
    for (std::size_t g = g0; g < g1; ++g) {
      const std::size_t j0 = g * kColumns, width = std::min(kColumns, n - j0);
      double* col[kColumns];
      for (std::size_t c = 0; c < width; ++c) col[c] = &mt[(j0 + c) * n];
      for (std::size_t i = j0; i < n; ++i) {
        const double* li = &l[i * n];
        double acc[kColumns] = {0.0, 0.0, 0.0, 0.0};
        // Column c takes k from j0 + c on: the group's first columns alone, then all of them.
        const std::size_t lead = std::min(i, j0 + width);
        for (std::size_t k = j0; k < lead; ++k)
          for (std::size_t c = 0; c <= k - j0; ++c) acc[c] -= li[k] * col[c][k];
        for (std::size_t k = j0 + width; k < i; ++k)
          for (std::size_t c = 0; c < width; ++c) acc[c] -= li[k] * col[c][k];
        const double inv = 1.0 / li[i];
        for (std::size_t c = 0; c < width && j0 + c <= i; ++c) col[c][i] = (j0 + c == i ? acc[c] + 1.0 : acc[c]) * inv;
      }
    }
  });
}

void lower_inverse_t_blocked(const double* l, std::size_t n, double* mt, int threads) {
  constexpr std::size_t W = 8;
  // Group g covers columns 8g..8g+8, whose work falls with g: the counter hands out the largest first.
  parallel_for_blocks((n + W - 1) / W, 1, threads, [&](std::size_t g0, std::size_t g1) {
    std::vector<double> buf(n * W);
    for (std::size_t g = g0; g < g1; ++g) {
      const std::size_t j0 = g * W, width = std::min(W, n - j0);
      inverse_group(l, n, j0, buf.data());
      for (std::size_t c = 0; c < width; ++c) {
        double* col = mt + (j0 + c) * n;
        std::fill(col, col + j0, 0.0);
        for (std::size_t i = j0; i < n; ++i) col[i] = buf[(i - j0) * W + c];
      }
    }
  });
}

}  // namespace epk::rate
