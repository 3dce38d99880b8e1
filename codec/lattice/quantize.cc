#include "codec/lattice/quantize.h"

#include <emmintrin.h>

#include <cmath>

namespace epk::lattice {

namespace {

// SSE2 form of nearest_e8 (e8.cc is the plain reference; tests/codec/lattice checks the two agree bit for bit).
// Valid for |y_i| < 2^22, where adding and removing 1.5 * 2^23 rounds half to even; callers fall back otherwise.
struct D8Candidate {
  alignas(16) std::int32_t z[kDim];
};

inline void nearest_d8_sse(__m128 y0, __m128 y1, std::int32_t* z) {
  const __m128 magic = _mm_set1_ps(12582912.0f);
  const __m128 f0 = _mm_sub_ps(_mm_add_ps(y0, magic), magic);
  const __m128 f1 = _mm_sub_ps(_mm_add_ps(y1, magic), magic);
  const __m128i z0 = _mm_cvtps_epi32(f0);  // exact: f is already an integer
  const __m128i z1 = _mm_cvtps_epi32(f1);
  _mm_store_si128(reinterpret_cast<__m128i*>(z), z0);
  _mm_store_si128(reinterpret_cast<__m128i*>(z + 4), z1);
  __m128i s = _mm_add_epi32(z0, z1);
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  if ((_mm_cvtsi128_si32(s) & 1) == 0) return;
  const __m128 r0 = _mm_sub_ps(y0, f0);
  const __m128 r1 = _mm_sub_ps(y1, f1);
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 a0 = _mm_andnot_ps(sign, r0);
  const __m128 a1 = _mm_andnot_ps(sign, r1);
  __m128 m = _mm_max_ps(a0, a1);
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0x4E));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0xB1));
  const int mask = _mm_movemask_ps(_mm_cmpeq_ps(a0, m)) | (_mm_movemask_ps(_mm_cmpeq_ps(a1, m)) << 4);
  const int k = __builtin_ctz(unsigned(mask));  // lowest index among the largest |residual|
  alignas(16) float r[kDim];
  _mm_store_ps(r, r0);
  _mm_store_ps(r + 4, r1);
  z[k] += r[k] < 0.0f ? -1 : 1;
}

// ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)) in float64 of (y_i - (z_i + offset))^2.
inline double distance2_sse(__m128 y0, __m128 y1, const std::int32_t* z, double offset) {
  const __m128d off = _mm_set1_pd(offset);
  const __m128i zi0 = _mm_load_si128(reinterpret_cast<const __m128i*>(z));
  const __m128i zi1 = _mm_load_si128(reinterpret_cast<const __m128i*>(z + 4));
  const __m128d d01 = _mm_sub_pd(_mm_cvtps_pd(y0), _mm_add_pd(_mm_cvtepi32_pd(zi0), off));
  const __m128d d23 = _mm_sub_pd(_mm_cvtps_pd(_mm_movehl_ps(y0, y0)),
                                 _mm_add_pd(_mm_cvtepi32_pd(_mm_shuffle_epi32(zi0, 0x4E)), off));
  const __m128d d45 = _mm_sub_pd(_mm_cvtps_pd(y1), _mm_add_pd(_mm_cvtepi32_pd(zi1), off));
  const __m128d d67 = _mm_sub_pd(_mm_cvtps_pd(_mm_movehl_ps(y1, y1)),
                                 _mm_add_pd(_mm_cvtepi32_pd(_mm_shuffle_epi32(zi1, 0x4E)), off));
  const __m128d a = _mm_add_pd(_mm_mul_pd(d01, d01), _mm_mul_pd(d45, d45));  // s0+s4, s1+s5
  const __m128d b = _mm_add_pd(_mm_mul_pd(d23, d23), _mm_mul_pd(d67, d67));  // s2+s6, s3+s7
  const __m128d c = _mm_add_pd(a, b);
  return _mm_cvtsd_f64(c) + _mm_cvtsd_f64(_mm_unpackhi_pd(c, c));
}

}  // namespace

void quantize_vectors(const float* x, std::size_t n, float scale, std::uint8_t* coset, std::int32_t* fields) {
  const __m128 s = _mm_set1_ps(scale);
  const __m128 limit = _mm_set1_ps(4194304.0f);
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 half = _mm_set1_ps(0.5f);
  for (std::size_t v = 0; v < n; ++v) {
    const __m128 y0 = _mm_div_ps(_mm_loadu_ps(x + v * kDim), s);
    const __m128 y1 = _mm_div_ps(_mm_loadu_ps(x + v * kDim + 4), s);
    const int small = _mm_movemask_ps(_mm_cmplt_ps(_mm_andnot_ps(sign, y0), limit)) &
                      _mm_movemask_ps(_mm_cmplt_ps(_mm_andnot_ps(sign, y1), limit));
    E8Point p;
    if (small != 0xF) {
      alignas(16) float y[kDim];
      _mm_store_ps(y, y0);
      _mm_store_ps(y + 4, y1);
      p = nearest_e8(y);
    } else {
      D8Candidate c0;
      D8Candidate c1;
      nearest_d8_sse(y0, y1, c0.z);
      nearest_d8_sse(_mm_sub_ps(y0, half), _mm_sub_ps(y1, half), c1.z);
      const double d0 = distance2_sse(y0, y1, c0.z, 0.0);
      const double d1 = distance2_sse(y0, y1, c1.z, 0.5);
      const D8Candidate& best = d0 <= d1 ? c0 : c1;
      p.c = d0 <= d1 ? 0 : 1;
      for (int i = 0; i < kDim; ++i) p.z[i] = best.z[i];
    }
    coset[v] = p.c;
    point_to_fields(p, fields + v * kFields);
  }
}

void quantize_vectors_ref(const float* x, std::size_t n, float scale, std::uint8_t* coset, std::int32_t* fields) {
  for (std::size_t v = 0; v < n; ++v) {
    float y[kDim];
    for (int i = 0; i < kDim; ++i) y[i] = x[v * kDim + i] / scale;
    const E8Point p = nearest_e8(y);
    coset[v] = p.c;
    point_to_fields(p, fields + v * kFields);
  }
}

}  // namespace epk::lattice
