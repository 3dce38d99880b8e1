#include "codec/rate/feedback_kernels.h"

#include <algorithm>

#include "codec/rate/simd.h"

namespace epk::rate {
namespace {

using simd::v8f;

// One row: the plain order, eight columns a step.
EPK_SIMD_INLINE void feedback_update_row(float* w, const float* f, std::size_t stride, const float* e, std::size_t j0,
                                         std::size_t j1) {
  std::size_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
    for (std::size_t k = 0; k < 8; ++k) acc += e[k] * simd::load8(f + k * stride + j);
    simd::store8(w + j, simd::load8(w + j) - acc);
  }
  for (; j < j1; ++j) {
    float acc = 0.0f;
    for (std::size_t k = 0; k < 8; ++k) acc += e[k] * f[k * stride + j];
    w[j] -= acc;
  }
}

// Four rows a pass: each load of f serves four accumulators (in a wide layer f's 8 rows are larger than L1 and their
// reads bound the one-row loop), each accumulator summing its row's eight products in the plain order.
EPK_SIMD_INLINE void feedback_update_rows_body(float* const* w, const float* f, std::size_t stride, const float* e,
                                               std::size_t rows, std::size_t j0, std::size_t j1) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    float *w0 = w[r], *w1 = w[r + 1], *w2 = w[r + 2], *w3 = w[r + 3];
    const float *e0 = e + 8 * r, *e1 = e0 + 8, *e2 = e0 + 16, *e3 = e0 + 24;
    std::size_t j = j0;
    for (; j + 8 <= j1; j += 8) {
      v8f a0 = {0, 0, 0, 0, 0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
      for (std::size_t k = 0; k < 8; ++k) {
        const v8f fk = simd::load8(f + k * stride + j);
        a0 += e0[k] * fk;
        a1 += e1[k] * fk;
        a2 += e2[k] * fk;
        a3 += e3[k] * fk;
      }
      simd::store8(w0 + j, simd::load8(w0 + j) - a0);
      simd::store8(w1 + j, simd::load8(w1 + j) - a1);
      simd::store8(w2 + j, simd::load8(w2 + j) - a2);
      simd::store8(w3 + j, simd::load8(w3 + j) - a3);
    }
    for (std::size_t q = 0; q < 4; ++q) feedback_update_row(w[r + q], f, stride, e + 8 * (r + q), j, j1);
  }
  for (; r < rows; ++r) feedback_update_row(w[r], f, stride, e + 8 * r, j0, j1);
}

// Terms of h copied together: 16 columns of up to kPackRows rows of h, contiguous (h's own rows are often a multiple
// of 4 KiB apart, so a column strip read in place maps to a few L1 sets and misses on every pass).
constexpr std::size_t kPackRows = 256;

// Four rows of g, two vectors of columns, in registers while m runs: each load of h serves four rows, each
// broadcast of v two vectors, and g is read and written once per strip and chunk instead of once per term.
EPK_SIMD_INLINE void rows_times_matrix_body(const float* v, std::size_t v_stride, std::size_t rows, const float* h,
                                            std::size_t h_stride, std::size_t count, float* g, std::size_t g_stride,
                                            std::size_t len) {
  alignas(32) float packed[kPackRows * 16];
  std::size_t j = 0;
  for (; j + 16 <= len; j += 16) {
    for (std::size_t m0 = 0; m0 < count; m0 += kPackRows) {
      const std::size_t m1 = std::min(count, m0 + kPackRows);
      for (std::size_t m = m0; m < m1; ++m) {
        simd::store8(packed + (m - m0) * 16, simd::load8(h + m * h_stride + j));
        simd::store8(packed + (m - m0) * 16 + 8, simd::load8(h + m * h_stride + j + 8));
      }
      std::size_t r = 0;
      for (; r + 4 <= rows; r += 4) {
        const float *v0 = v + r * v_stride + m0, *v1 = v0 + v_stride, *v2 = v1 + v_stride, *v3 = v2 + v_stride;
        float *g0 = g + r * g_stride + j, *g1 = g0 + g_stride, *g2 = g1 + g_stride, *g3 = g2 + g_stride;
        v8f a0 = simd::load8(g0), b0 = simd::load8(g0 + 8), a1 = simd::load8(g1), b1 = simd::load8(g1 + 8),
            a2 = simd::load8(g2), b2 = simd::load8(g2 + 8), a3 = simd::load8(g3), b3 = simd::load8(g3 + 8);
        const float* hm = packed;
        for (std::size_t m = 0; m < m1 - m0; ++m, hm += 16) {
          const v8f x = simd::load8(hm), y = simd::load8(hm + 8);
          const float c0 = v0[m], c1 = v1[m], c2 = v2[m], c3 = v3[m];
          a0 += c0 * x;
          b0 += c0 * y;
          a1 += c1 * x;
          b1 += c1 * y;
          a2 += c2 * x;
          b2 += c2 * y;
          a3 += c3 * x;
          b3 += c3 * y;
        }
        simd::store8(g0, a0);
        simd::store8(g0 + 8, b0);
        simd::store8(g1, a1);
        simd::store8(g1 + 8, b1);
        simd::store8(g2, a2);
        simd::store8(g2 + 8, b2);
        simd::store8(g3, a3);
        simd::store8(g3 + 8, b3);
      }
      for (; r < rows; ++r) {
        const float* vr = v + r * v_stride + m0;
        float* gr = g + r * g_stride + j;
        v8f a = simd::load8(gr), b = simd::load8(gr + 8);
        const float* hm = packed;
        for (std::size_t m = 0; m < m1 - m0; ++m, hm += 16) {
          a += vr[m] * simd::load8(hm);
          b += vr[m] * simd::load8(hm + 8);
        }
        simd::store8(gr, a);
        simd::store8(gr + 8, b);
      }
    }
  }
  // The last len % 16 columns in place: vectors of 8, then single columns.
  for (std::size_t r = 0; r < rows; ++r) {
    const float* vr = v + r * v_stride;
    float* gr = g + r * g_stride;
    std::size_t jj = j;
    for (; jj + 8 <= len; jj += 8) {
      v8f a = simd::load8(gr + jj);
      const float* hm = h + jj;
      for (std::size_t m = 0; m < count; ++m, hm += h_stride) a += vr[m] * simd::load8(hm);
      simd::store8(gr + jj, a);
    }
    for (; jj < len; ++jj) {
      float acc = gr[jj];
      for (std::size_t m = 0; m < count; ++m) acc += vr[m] * h[m * h_stride + jj];
      gr[jj] = acc;
    }
  }
}

void feedback_update_rows_baseline(float* const* w, const float* f, std::size_t stride, const float* e,
                                   std::size_t rows, std::size_t j0, std::size_t j1) {
  feedback_update_rows_body(w, f, stride, e, rows, j0, j1);
}
void rows_times_matrix_baseline(const float* v, std::size_t v_stride, std::size_t rows, const float* h,
                                std::size_t h_stride, std::size_t count, float* g, std::size_t g_stride,
                                std::size_t len) {
  rows_times_matrix_body(v, v_stride, rows, h, h_stride, count, g, g_stride, len);
}
#if EPK_SIMD_DISPATCH
EPK_TARGET_AVX2 void feedback_update_rows_avx2(float* const* w, const float* f, std::size_t stride, const float* e,
                                               std::size_t rows, std::size_t j0, std::size_t j1) {
  feedback_update_rows_body(w, f, stride, e, rows, j0, j1);
}
EPK_TARGET_AVX2 void rows_times_matrix_avx2(const float* v, std::size_t v_stride, std::size_t rows, const float* h,
                                            std::size_t h_stride, std::size_t count, float* g, std::size_t g_stride,
                                            std::size_t len) {
  rows_times_matrix_body(v, v_stride, rows, h, h_stride, count, g, g_stride, len);
}
#endif

}  // namespace

void feedback_update_rows(float* const* w, const float* f, std::size_t stride, const float* e, std::size_t rows,
                          std::size_t j0, std::size_t j1) {
#if EPK_SIMD_DISPATCH
  if (simd::have_avx2()) return feedback_update_rows_avx2(w, f, stride, e, rows, j0, j1);
#endif
  feedback_update_rows_baseline(w, f, stride, e, rows, j0, j1);
}

void feedback_update_rows_reference(float* const* w, const float* f, std::size_t stride, const float* e,
                                    std::size_t rows, std::size_t j0, std::size_t j1) {
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = j0; j < j1; ++j) {
      float acc = 0.0f;
      for (int k = 0; k < 8; ++k) acc += e[8 * r + k] * f[std::size_t(k) * stride + j];
      w[r][j] -= acc;
    }
  }
}

void rows_times_matrix(const float* v, std::size_t v_stride, std::size_t rows, const float* h, std::size_t h_stride,
                       std::size_t count, float* g, std::size_t g_stride, std::size_t len) {
#if EPK_SIMD_DISPATCH
  if (simd::have_avx2()) return rows_times_matrix_avx2(v, v_stride, rows, h, h_stride, count, g, g_stride, len);
#endif
  rows_times_matrix_baseline(v, v_stride, rows, h, h_stride, count, g, g_stride, len);
}

void rows_times_matrix_reference(const float* v, std::size_t v_stride, std::size_t rows, const float* h,
                                 std::size_t h_stride, std::size_t count, float* g, std::size_t g_stride,
                                 std::size_t len) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t m = 0; m < count; ++m)
      for (std::size_t j = 0; j < len; ++j) g[r * g_stride + j] += v[r * v_stride + m] * h[m * h_stride + j];
}

}  // namespace epk::rate
