#include "codec/rate/feedback.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "codec/common/parallel.h"
#include "codec/lattice/e8.h"
#include "codec/lattice/quantize.h"
#include "codec/rate/cholesky.h"
#include "codec/rate/feedback_kernels.h"

namespace epk::rate {
namespace {

constexpr double kMinScale = 1e-12;
// Rows quantized together, so that each block's update rows are read once per tile (F is far larger than caches).
constexpr std::size_t kTileRows = 16;
// Rows refitted together: H's products are blocked across them (h_times_rows), so more rows read H fewer times; each
// row's arithmetic does not depend on the tile.
constexpr std::size_t kRefitTileRows = 64;

}  // namespace

std::vector<std::uint32_t> block_order(const HessianView& hv) {
  const std::size_t n = hv.cols, full = n / 8;
  std::vector<double> energy(full, 0.0);
  for (std::size_t b = 0; b < full; ++b)
    for (std::size_t i = b * 8; i < b * 8 + 8; ++i) energy[b] += double(hv.h[i * n + i]);
  std::vector<std::uint32_t> order((n + 7) / 8);
  for (std::size_t b = 0; b < order.size(); ++b) order[b] = std::uint32_t(b);
  std::stable_sort(order.begin(), order.begin() + full,
                   [&](std::uint32_t a, std::uint32_t b) { return energy[a] > energy[b]; });
  return order;
}

std::vector<double> damped_reversed_hessian(const HessianView& hv, const std::vector<std::uint32_t>& order,
                                            std::vector<std::uint8_t>& dead, double& damp) {
  const std::size_t n = hv.cols;
  dead.assign(n, 0);
  std::vector<double> a(n * n);
  double diag_sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (hv.h[i * n + i] == 0.0f) dead[i] = 1;
    diag_sum += dead[i] ? 1.0 : double(hv.h[i * n + i]);
  }
  damp = kFeedbackDamping * diag_sum / double(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      const std::size_t hi = order_column(order, n - 1 - i), hj = order_column(order, n - 1 - j);
      double v = 0.5 * (double(hv.h[hi * n + hj]) + double(hv.h[hj * n + hi]));
      if (i == j) v = (dead[hi] ? 1.0 : v) + damp;
      a[i * n + j] = v;
    }
  }
  return a;
}

Result<FeedbackFactor> make_feedback_factor(const HessianView& hv, std::string_view name, int threads) {
  const std::size_t n = hv.cols;
  FeedbackFactor out;
  out.cols = hv.cols;
  out.h = &hv;
  out.order = block_order(hv);
  // A = J H_P J (J the reversal), symmetrised, with GPTQ's dead-column fix-up and damping. Its lower Cholesky factor
  // L gives H_P = R R^T with R = J L J upper triangular, so H_P^-1 = R^-T R^-1 and U = R^-1 = J L^-1 J is H_P^-1's
  // upper Cholesky factor: one factorisation and one triangular inverse instead of GPTQ's three steps.
  std::vector<double> a = damped_reversed_hessian(hv, out.order, out.dead, out.damp);
  // Cholesky in place (lower triangle), then M = L^-1, held transposed (column j at mt[j * n]): the blocked forms,
  // bit for bit the plain ones (codec/rate/cholesky.h), so the factor does not depend on the thread count.
  if (cholesky_lower_blocked(a.data(), n, threads) != n) {
    return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(name) +
                                                       "': its hessian is not positive definite after damping");
  }
  std::vector<double> mt(n * n);
  lower_inverse_t_blocked(a.data(), n, mt.data(), threads);
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
  // Each row is carried in processing order (position p holds column order_column(p); the padding after a partial
  // last block, which stays last, keeps its place), and each vector is written at its own block's index.
  std::vector<std::size_t> col(n), dead_pos;
  for (std::size_t p = 0; p < n; ++p) {
    col[p] = order_column(f.order, p);
    if (f.dead[col[p]]) dead_pos.push_back(p);
  }
  const std::size_t tiles = (rows + kTileRows - 1) / kTileRows;
  parallel_for_blocks(tiles, 1, threads, [&](std::size_t t0, std::size_t t1) {
    std::vector<float> w(kTileRows * padded_cols), e(kTileRows * 8), block(kTileRows * 8);
    std::vector<std::uint8_t> block_coset(kTileRows);
    std::vector<std::int32_t> block_fields(kTileRows * lattice::kFields);
    std::vector<float*> rows_w(kTileRows);
    for (std::size_t r = 0; r < kTileRows; ++r) rows_w[r] = &w[r * padded_cols];
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t r0 = t * kTileRows, r1 = std::min(rows, r0 + kTileRows);
      for (std::size_t r = r0; r < r1; ++r) {
        const float* xr = x + r * padded_cols;
        float* wr = rows_w[r - r0];
        for (std::size_t p = 0; p < n; ++p) wr[p] = xr[col[p]];
        std::copy(xr + n, xr + padded_cols, wr + n);
      }
      for (std::size_t v = 0; v < vpr; ++v) {
        const std::size_t b0 = v * 8;
        // Each row's block is rounded from the row as every earlier block's feedback left it; the rows are
        // independent, so the tile's rows are rounded together (quantize_vectors: x / scale in float32, the
        // nearest point, its fields) and their feedback applied together.
        const std::size_t tile_rows = r1 - r0;
        for (std::size_t r = 0; r < tile_rows; ++r) std::copy_n(rows_w[r] + b0, 8, &block[r * 8]);
        lattice::quantize_vectors(block.data(), tile_rows, scale, block_coset.data(), block_fields.data());
        for (std::size_t r = 0; r < tile_rows; ++r) {
          const std::int32_t* fields = &block_fields[r * lattice::kFields];
          const std::size_t vi = (r0 + r) * vpr + f.order[v];
          out.coset[vi] = block_coset[r];
          std::copy_n(fields, lattice::kFields, &out.fields[vi * lattice::kFields]);
          const lattice::E8Point p = lattice::fields_to_point(block_coset[r], fields);
          for (int i = 0; i < 8; ++i) e[r * 8 + i] = block[r * 8 + i] - scale * lattice::coordinate(p.z[i], p.c);
        }
        if (b0 + 8 >= n) continue;  // the last block: no column after it
        // w_rest -= e F_b, one pass over the tile's remaining positions.
        feedback_update_rows(rows_w.data(), &f.f[b0 * n], n, e.data(), tile_rows, b0 + 8, n);
        // A dead column stays zero, as GPTQ keeps it.
        for (auto d = std::upper_bound(dead_pos.begin(), dead_pos.end(), b0 + 7); d != dead_pos.end(); ++d)
          for (std::size_t r = r0; r < r1; ++r) rows_w[r - r0][*d] = 0.0f;
      }
    }
  });
}

void refit_rows_h(const float* x, std::uint32_t rows, std::uint32_t padded_cols, const lattice::QuantizedFields& q,
                  double scale, const float* rms, const FeedbackFactor& f, std::vector<float>& scales, int threads) {
  const std::size_t n = f.cols;
  const std::size_t vpr = padded_cols / 8;
  scales.resize(rows);
  const std::size_t tiles = (rows + kRefitTileRows - 1) / kRefitTileRows;
  parallel_for_blocks(tiles, 1, threads, [&](std::size_t t0, std::size_t t1) {
    std::vector<float> p(kRefitTileRows * padded_cols), g(kRefitTileRows * n);
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t r0 = t * kRefitTileRows, r1 = std::min<std::size_t>(rows, r0 + kRefitTileRows);
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
