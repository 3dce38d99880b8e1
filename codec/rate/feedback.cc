#include "codec/rate/feedback.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "codec/common/parallel.h"
#include "codec/lattice/e8.h"

namespace epk::rate {
namespace {

constexpr double kMinScale = 1e-12;
// Rows quantized together, so that each block's update rows are read once per tile (F is far larger than caches).
constexpr std::size_t kTileRows = 16;

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

}  // namespace

Result<FeedbackFactor> make_feedback_factor(const HessianView& hv, std::string_view name, int threads) {
  const std::size_t n = hv.cols;
  FeedbackFactor out;
  out.cols = hv.cols;
  out.h = &hv;
  out.dead.assign(n, 0);
  // A = J H J (J the reversal), symmetrised, with GPTQ's dead-column fix-up and damping. Its lower Cholesky factor
  // L gives H = R R^T with R = J L J upper triangular, so H^-1 = R^-T R^-1 and U = R^-1 = J L^-1 J is H^-1's upper
  // Cholesky factor: one factorisation and one triangular inverse instead of GPTQ's three steps.
  std::vector<double> a(n * n);
  double diag_sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (hv.h[i * n + i] == 0.0f) out.dead[i] = 1;
    diag_sum += out.dead[i] ? 1.0 : double(hv.h[i * n + i]);
  }
  out.damp = kFeedbackDamping * diag_sum / double(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      const std::size_t hi = n - 1 - i, hj = n - 1 - j;
      double v = 0.5 * (double(hv.h[hi * n + hj]) + double(hv.h[hj * n + hi]));
      if (i == j) v = (out.dead[hi] ? 1.0 : v) + out.damp;
      a[i * n + j] = v;
    }
  }
  // Cholesky in place (lower triangle), column by column (Cholesky-Crout): column j's diagonal, then every row
  // below it, L_ij = (A_ij - <L_i,<j, L_j,<j>) / L_jj. The rows of one column are independent, so they run on
  // `threads`; each entry is the same dot product in the same order as the row-by-row (Banachiewicz) form, so L does
  // not depend on the thread count (tests/codec/rate/calibration_test.cc holds it to the row-by-row form bit for bit).
  for (std::size_t j = 0; j < n; ++j) {
    double* lj = &a[j * n];
    const double d = lj[j] - dot(lj, lj, j);
    if (!(d > 0.0)) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(name) +
                                                         "': its hessian is not positive definite after damping");
    }
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
  // M = L^-1 (lower) by forward substitution, column by column: M_jj = 1 / L_jj, and below it
  // M_ij = (0 - L_ij M_jj - L_i,j+1 M_j+1,j - ... - L_i,i-1 M_i-1,j) / L_ii, subtracted in that order. Columns are
  // independent, so groups of kColumns run on `threads` (the group's columns interleaved for the multiply-add
  // chains' latency); each entry's arithmetic is fixed, so M does not depend on the thread count. mt holds M
  // transposed (column j at mt[j * n]).
  constexpr std::size_t kColumns = 4;
  std::vector<double> mt(n * n, 0.0);
  parallel_for_blocks((n + kColumns - 1) / kColumns, 1, threads, [&](std::size_t g0, std::size_t g1) {
    for (std::size_t g = g0; g < g1; ++g) {
      const std::size_t j0 = g * kColumns, width = std::min(kColumns, n - j0);
      double* col[kColumns];
      for (std::size_t c = 0; c < width; ++c) col[c] = &mt[(j0 + c) * n];
      for (std::size_t i = j0; i < n; ++i) {
        const double* li = &a[i * n];
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
  // U_ij = M_{n-1-i, n-1-j}; then F_b = U_bb^-1 U_b,rest by forward substitution over the block's 8 rows (for the
  // columns after the block; a partial last block has none).
  out.f.assign(n * n, 0.0f);
  std::vector<double> u(8 * n);
  for (std::size_t b0 = 0; b0 + 8 < n; b0 += 8) {
    const std::size_t rest0 = b0 + 8;
    for (std::size_t k = 0; k < 8; ++k)
      for (std::size_t j = b0; j < n; ++j) u[k * n + j] = mt[(n - 1 - j) * n + (n - 1 - (b0 + k))];
    // U_bb F_b = U_b,rest by back substitution: F[k] = (U_b,rest[k] - sum_{m>k} U_bb[k][m] F[m]) / U_bb[k][k].
    for (std::size_t kk = 8; kk-- > 0;) {
      double* fk = &u[kk * n];
      for (std::size_t mm = kk + 1; mm < 8; ++mm) {
        const double c = u[kk * n + b0 + mm];
        const double* fm = &u[mm * n];
        for (std::size_t j = rest0; j < n; ++j) fk[j] -= c * fm[j];
      }
      const double inv = 1.0 / u[kk * n + b0 + kk];
      for (std::size_t j = rest0; j < n; ++j) fk[j] *= inv;
    }
    for (std::size_t k = 0; k < 8; ++k)
      for (std::size_t j = rest0; j < n; ++j) out.f[(b0 + k) * n + j] = float(u[k * n + j]);
  }
  return out;
}

void quantize_feedback(const float* x, std::size_t rows, std::uint32_t padded_cols, float scale,
                       const FeedbackFactor& f, lattice::QuantizedFields& out, int threads) {
  const std::size_t n = f.cols;
  const std::size_t vpr = padded_cols / 8;
  out.resize(rows * vpr);
  const std::size_t tiles = (rows + kTileRows - 1) / kTileRows;
  parallel_for_blocks(tiles, 1, threads, [&](std::size_t t0, std::size_t t1) {
    std::vector<float> w(kTileRows * padded_cols);
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t r0 = t * kTileRows, r1 = std::min(rows, r0 + kTileRows);
      std::copy(x + r0 * padded_cols, x + r1 * padded_cols, w.begin());
      for (std::size_t v = 0; v < vpr; ++v) {
        const std::size_t b0 = v * 8;
        for (std::size_t r = r0; r < r1; ++r) {
          float* wr = &w[(r - r0) * padded_cols];
          float y[8];
          for (int i = 0; i < 8; ++i) y[i] = wr[b0 + i] / scale;  // the quantizer's float32 division
          const lattice::E8Point p = lattice::nearest_e8(y);
          const std::size_t vi = r * vpr + v;
          out.coset[vi] = p.c;
          lattice::point_to_fields(p, &out.fields[vi * lattice::kFields]);
          if (b0 + 8 >= n) continue;  // the last block: no column after it
          float e[8];
          for (int i = 0; i < 8; ++i) e[i] = wr[b0 + i] - scale * lattice::coordinate(p.z[i], p.c);
          // w_rest -= e F_b, one pass over the row's remaining columns.
          const float* fb = &f.f[b0 * n];
          for (std::size_t j = b0 + 8; j < n; ++j) {
            float acc = 0.0f;
            for (int k = 0; k < 8; ++k) acc += e[k] * fb[std::size_t(k) * n + j];
            wr[j] -= acc;
          }
          for (std::size_t j = b0 + 8; j < n; ++j)
            if (f.dead[j]) wr[j] = 0.0f;  // a dead column stays zero, as GPTQ keeps it
        }
      }
    }
  });
}

void refit_rows_h(const float* x, std::uint32_t rows, std::uint32_t padded_cols, const lattice::QuantizedFields& q,
                  double scale, const float* rms, const FeedbackFactor& f, std::vector<float>& scales, int threads) {
  const std::size_t n = f.cols;
  const std::size_t vpr = padded_cols / 8;
  scales.resize(rows);
  const std::size_t tiles = (rows + kTileRows - 1) / kTileRows;
  parallel_for_blocks(tiles, 1, threads, [&](std::size_t t0, std::size_t t1) {
    std::vector<float> p(kTileRows * padded_cols), g(kTileRows * n);
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t r0 = t * kTileRows, r1 = std::min<std::size_t>(rows, r0 + kTileRows);
      for (std::size_t r = r0; r < r1; ++r) {
        for (std::size_t v = 0; v < vpr; ++v) {
          const lattice::E8Point pt = lattice::fields_to_point(q.coset[r * vpr + v], &q.fields[(r * vpr + v) * 8]);
          for (int i = 0; i < 8; ++i) p[(r - r0) * padded_cols + v * 8 + i] = lattice::coordinate(pt.z[i], pt.c);
        }
      }
      // p is indexed from r0: rows 0..r1-r0 of the tile.
      h_times_rows(p.data(), 0, r1 - r0, padded_cols, *f.h, g.data());
      for (std::size_t r = r0; r < r1; ++r) {
        const float* pr = &p[(r - r0) * padded_cols];
        const float* gr = &g[(r - r0) * n];
        const float* xr = x + r * padded_cols;
        double num = 0.0, den = 0.0, pp = 0.0;
        for (std::size_t j = 0; j < n; ++j) {
          num += double(xr[j]) * (double(gr[j]) + f.damp * double(pr[j]));
          den += double(pr[j]) * (double(gr[j]) + f.damp * double(pr[j]));
          pp += double(pr[j]) * double(pr[j]);
        }
        if (pp > 0.0 && den > 0.0) {
          scales[r] = float(std::max(num / den, kMinScale));
        } else {
          scales[r] = float(scale) * rms[r];
        }
      }
    }
  });
}

}  // namespace epk::rate
