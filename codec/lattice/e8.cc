#include "codec/lattice/e8.h"

#include <cmath>

namespace epk::lattice {

namespace {

// Round half to even in the default rounding mode without a libm call: adding and removing 1.5 * 2^23 leaves the
// integer nearest to y for |y| < 2^22; larger values take the library path.
inline float round_even(float y) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  if (std::fabs(y) < 4194304.0f) {
    const float t = y + kMagic;  // not folded: without -ffast-math the compiler keeps both roundings
    return t - kMagic;
  }
  return std::nearbyint(y);
}

}  // namespace

void nearest_d8(const float y[kDim], std::int32_t out[kDim]) {
  std::int64_t sum = 0;
  int worst = 0;
  float worst_abs = -1.0f;
  float worst_resid = 0.0f;
  for (int i = 0; i < kDim; ++i) {
    const float f = round_even(y[i]);
    const float r = y[i] - f;
    out[i] = std::int32_t(f);
    sum += out[i];
    const float a = std::fabs(r);
    if (a > worst_abs) {  // strict: the lowest index wins ties
      worst_abs = a;
      worst = i;
      worst_resid = r;
    }
  }
  if (sum & 1) out[worst] += worst_resid < 0.0f ? -1 : 1;
}

namespace {

// Squared distance in float64, summed in the order the reference's reduction uses (4-wide partial sums, then a tree).
double distance2(const float y[kDim], const std::int32_t z[kDim], double offset) {
  double s[kDim];
  for (int i = 0; i < kDim; ++i) {
    const double d = double(y[i]) - (double(z[i]) + offset);
    s[i] = d * d;
  }
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

}  // namespace

E8Point nearest_e8(const float y[kDim]) {
  E8Point p0;
  E8Point p1;
  p0.c = 0;
  p1.c = 1;
  nearest_d8(y, p0.z);
  float shifted[kDim];
  for (int i = 0; i < kDim; ++i) shifted[i] = y[i] - 0.5f;  // float32, as the reference
  nearest_d8(shifted, p1.z);
  // The reference forms the half-integer candidate as float(z) + 0.5f, exact for |z| < 2^23.
  const double d0 = distance2(y, p0.z, 0.0);
  const double d1 = distance2(y, p1.z, 0.5);
  return d0 <= d1 ? p0 : p1;
}

void point_to_fields(const E8Point& p, std::int32_t fields[kFields]) {
  std::int32_t par = 0;
  for (int i = 0; i < 7; ++i) {
    fields[i] = p.z[i];
    par ^= p.z[i] & 1;
  }
  // floor division; for points of D8 the numerator is even
  const std::int64_t num = std::int64_t(p.z[7]) - par;
  fields[7] = std::int32_t(num >= 0 ? num / 2 : -((-num + 1) / 2));
}

E8Point fields_to_point(std::uint8_t c, const std::int32_t fields[kFields]) {
  E8Point p;
  p.c = c;
  std::int32_t par = 0;
  for (int i = 0; i < 7; ++i) {
    p.z[i] = fields[i];
    par ^= fields[i] & 1;
  }
  p.z[7] = 2 * fields[7] + par;
  return p;
}

}  // namespace epk::lattice
