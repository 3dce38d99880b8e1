#include "codec/rate/feedback_kernels.h"

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

// Four rows a pass: each load of f serves four accumulators (f's block is far larger than L1, so its reads bound the
// one-row loop), each accumulator summing its row's eight products in the plain order.
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

// Four rows of H per pass over g (fewer loads and stores of g), each row's multiply and add in turn.
EPK_SIMD_INLINE void axpy_rows_body(const float* a, const float* const* h, std::size_t count,
                                    float* g, std::size_t len) {
  std::size_t m = 0;
  for (; m + 4 <= count; m += 4) {
    const float *h_0 = h[m], *h_1 = h[m + 1], *h_2 = h[m + 2], *h_3 = h[m + 3];
    const float a0 = a[m], a1 = a[m + 1], a2 = a[m + 2], a3 = a[m + 3];
    std::size_t j = 0;
    for (; j + 8 <= len; j += 8) {
      v8f s = simd::load8(g + j);
      s += a0 * simd::load8(h_0 + j);
      s += a1 * simd::load8(h_1 + j);
      s += a2 * simd::load8(h_2 + j);
      s += a3 * simd::load8(h_3 + j);
      simd::store8(g + j, s);
    }
    for (; j < len; ++j) {
      float s = g[j];
      s += a0 * h_0[j];
      s += a1 * h_1[j];
      s += a2 * h_2[j];
      s += a3 * h_3[j];
      g[j] = s;
    }
  }
  for (; m < count; ++m) {
    const float* hm = h[m];
    const float am = a[m];
    std::size_t j = 0;
    for (; j + 8 <= len; j += 8) simd::store8(g + j, simd::load8(g + j) + am * simd::load8(hm + j));
    for (; j < len; ++j) g[j] += am * hm[j];
  }
}

void feedback_update_rows_baseline(float* const* w, const float* f, std::size_t stride, const float* e,
                                   std::size_t rows, std::size_t j0, std::size_t j1) {
  feedback_update_rows_body(w, f, stride, e, rows, j0, j1);
}
void axpy_rows_baseline(const float* a, const float* const* h, std::size_t count, float* g,
                        std::size_t len) {
  axpy_rows_body(a, h, count, g, len);
}
#if EPK_SIMD_DISPATCH
EPK_TARGET_AVX2 void feedback_update_rows_avx2(float* const* w, const float* f, std::size_t stride, const float* e,
                                               std::size_t rows, std::size_t j0, std::size_t j1) {
  feedback_update_rows_body(w, f, stride, e, rows, j0, j1);
}
EPK_TARGET_AVX2 void axpy_rows_avx2(const float* a, const float* const* h, std::size_t count,
                                    float* g, std::size_t len) {
  axpy_rows_body(a, h, count, g, len);
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

void axpy_rows(const float* a, const float* const* h, std::size_t count, float* g, std::size_t len) {
#if EPK_SIMD_DISPATCH
  if (simd::have_avx2()) return axpy_rows_avx2(a, h, count, g, len);
#endif
  axpy_rows_baseline(a, h, count, g, len);
}

void axpy_rows_reference(const float* a, const float* const* h, std::size_t count, float* g,
                         std::size_t len) {
  for (std::size_t m = 0; m < count; ++m)
    for (std::size_t j = 0; j < len; ++j) g[j] += a[m] * h[m][j];
}

}  // namespace epk::rate
