// Device form of codec/lattice/e8.cc's nearest_e8 and point_to_fields: the same float32 / float64 operations in the
// same order with the same tie rules, every operation written with an explicit round-to-nearest intrinsic so that no
// multiply-add is contracted (the encoder's .cu files are also built with -fmad=false). Equal to the CPU function
// for every finite input with |y_i| < 2^30 (tests/codec/cuda/encode_test.cc compares them).
#pragma once

#include <cstdint>

namespace epk::cuda::enc {

// e8.cc's round_even: adding and removing 1.5 * 2^23 for |y| < 2^22, rint (the default rounding mode) beyond.
__device__ __forceinline__ float round_even(float y) {
  constexpr float kMagic = 12582912.0f;
  if (fabsf(y) < 4194304.0f) return __fsub_rn(__fadd_rn(y, kMagic), kMagic);
  return rintf(y);
}

__device__ __forceinline__ void nearest_d8(const float y[8], std::int32_t out[8]) {
  long long sum = 0;
  int worst = 0;
  float worst_abs = -1.0f;
  float worst_resid = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float f = round_even(y[i]);
    const float r = __fsub_rn(y[i], f);
    out[i] = std::int32_t(f);
    sum += out[i];
    const float a = fabsf(r);
    if (a > worst_abs) {  // strict: the lowest index wins ties
      worst_abs = a;
      worst = i;
      worst_resid = r;
    }
  }
  if (sum & 1) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i == worst) out[i] += worst_resid < 0.0f ? -1 : 1;
  }
}

// ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)) in float64 of (y_i - (z_i + offset))^2, as e8.cc's distance2.
__device__ __forceinline__ double distance2(const float y[8], const std::int32_t z[8], double offset) {
  double s[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const double d = __dsub_rn(double(y[i]), __dadd_rn(double(z[i]), offset));
    s[i] = __dmul_rn(d, d);
  }
  return __dadd_rn(__dadd_rn(__dadd_rn(s[0], s[4]), __dadd_rn(s[2], s[6])),
                   __dadd_rn(__dadd_rn(s[1], s[5]), __dadd_rn(s[3], s[7])));
}

// Nearest E8 point of y as (coset c, fields f[8]) = point_to_fields(nearest_e8(y)).
__device__ __forceinline__ std::uint8_t nearest_e8_fields(const float y[8], std::int32_t f[8]) {
  std::int32_t z0[8];
  std::int32_t z1[8];
  nearest_d8(y, z0);
  float shifted[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) shifted[i] = __fsub_rn(y[i], 0.5f);
  nearest_d8(shifted, z1);
  const double d0 = distance2(y, z0, 0.0);
  const double d1 = distance2(y, z1, 0.5);
  const bool first = d0 <= d1;
  std::int32_t par = 0;
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    f[i] = first ? z0[i] : z1[i];
    par ^= f[i] & 1;
  }
  const long long num = (long long)(first ? z0[7] : z1[7]) - par;
  f[7] = std::int32_t(num >= 0 ? num / 2 : -((-num + 1) / 2));
  return first ? 0 : 1;
}

// lattice::coordinate: float(z) + 0.5f * c.
__device__ __forceinline__ float coordinate(std::int32_t z, std::uint8_t c) {
  return __fadd_rn(float(z), __fmul_rn(0.5f, float(c)));
}

}  // namespace epk::cuda::enc
