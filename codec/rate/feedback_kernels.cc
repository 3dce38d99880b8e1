#include "codec/rate/feedback_kernels.h"

#include "codec/rate/simd.h"

namespace epk::rate {
namespace {

using simd::v8f;

EPK_SIMD_INLINE void feedback_update_body(float* w, const float* f, std::size_t stride, const float* e,
                                          std::size_t j0, std::size_t j1) {
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

void feedback_update_baseline(float* w, const float* f, std::size_t stride, const float* e, std::size_t j0,
                              std::size_t j1) {
  feedback_update_body(w, f, stride, e, j0, j1);
}
void axpy_rows_baseline(const float* a, const float* const* h, std::size_t count, float* g,
                        std::size_t len) {
  axpy_rows_body(a, h, count, g, len);
}
#if EPK_SIMD_DISPATCH
EPK_TARGET_AVX2 void feedback_update_avx2(float* w, const float* f, std::size_t stride, const float* e,
                                          std::size_t j0, std::size_t j1) {
  feedback_update_body(w, f, stride, e, j0, j1);
}
EPK_TARGET_AVX2 void axpy_rows_avx2(const float* a, const float* const* h, std::size_t count,
                                    float* g, std::size_t len) {
  axpy_rows_body(a, h, count, g, len);
}
#endif

}  // namespace

void feedback_update(float* w, const float* f, std::size_t stride, const float* e, std::size_t j0, std::size_t j1) {
#if EPK_SIMD_DISPATCH
  if (simd::have_avx2()) return feedback_update_avx2(w, f, stride, e, j0, j1);
#endif
  feedback_update_baseline(w, f, stride, e, j0, j1);
}

void feedback_update_reference(float* w, const float* f, std::size_t stride, const float* e, std::size_t j0,
                               std::size_t j1) {
  for (std::size_t j = j0; j < j1; ++j) {
    float acc = 0.0f;
    for (int k = 0; k < 8; ++k) acc += e[k] * f[std::size_t(k) * stride + j];
    w[j] -= acc;
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
