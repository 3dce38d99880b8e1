// Conversions between float32 and the narrow float formats weights come in and go out as (bf16, fp16, fp8 e4m3fn,
// fp8 e5m2), bit-exact with PyTorch's casts: round to nearest even, subnormals kept. The narrowing functions expect a
// finite value inside the target's range (callers saturate first, as the reference decoder does).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace epk {

// Format parameters: exponent bits E, mantissa bits M; bias 2^(E-1) - 1 for all four formats.
template <int E, int M>
struct NarrowFloat {
  static constexpr int kBias = (1 << (E - 1)) - 1;
  static constexpr int kBits = 1 + E + M;
};
using Bf16Format = NarrowFloat<8, 7>;
using F16Format = NarrowFloat<5, 10>;
using F8E4M3Format = NarrowFloat<4, 3>;  // "fn": no infinities, exponent 15 mantissa 7 is NaN, max 448
using F8E5M2Format = NarrowFloat<5, 2>;  // IEEE-like: max 57344, infinities and NaNs

inline constexpr float kBf16Max = 3.38953139e38f;
inline constexpr float kF16Max = 65504.0f;
inline constexpr float kF8E4M3Max = 448.0f;
inline constexpr float kF8E5M2Max = 57344.0f;

// float32 -> narrow format bits, round to nearest even. v must be finite and |v| <= the format's max.
template <int E, int M>
inline std::uint32_t narrow_from_float(float v) {
  constexpr int bias = NarrowFloat<E, M>::kBias;
  std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t sign = u >> 31;
  u &= 0x7fffffffu;
  const int e = int(u >> 23) - 127 + bias;
  std::uint32_t r;
  if (e >= 1) {
    constexpr int shift = 23 - M;
    // Rounding the exponent and mantissa bits together lets a carry move into the next binade, as it should.
    r = (u + ((1u << (shift - 1)) - 1) + ((u >> shift) & 1)) >> shift;
    r -= std::uint32_t(127 - bias) << M;
  } else {
    // Subnormal in the target: the value in units of the smallest subnormal, rounded half to even (scaling by a
    // power of two is exact). A result of 2^M is the smallest normal, whose encoding is the same integer.
    const float a = std::bit_cast<float>(u);
    r = std::uint32_t(std::nearbyint(std::ldexp(a, bias - 1 + M)));
  }
  return (sign << (E + M)) | r;
}

// Narrow format bits -> float32 (exact). For e4m3fn, exponent and mantissa all ones is NaN; for the others, an
// all-ones exponent is infinity or NaN.
template <int E, int M, bool kFiniteOnly = false>
inline float float_from_narrow(std::uint32_t bits) {
  constexpr int bias = NarrowFloat<E, M>::kBias;
  const std::uint32_t sign = (bits >> (E + M)) & 1;
  const std::uint32_t exp = (bits >> M) & ((1u << E) - 1);
  const std::uint32_t man = bits & ((1u << M) - 1);
  float mag;
  if (kFiniteOnly && exp == (1u << E) - 1 && man == (1u << M) - 1) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (!kFiniteOnly && exp == (1u << E) - 1) {
    mag = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exp == 0) {
    mag = std::ldexp(float(man), 1 - bias - M);
  } else {
    mag = std::ldexp(float(man | (1u << M)), int(exp) - bias - M);
  }
  return sign ? -mag : mag;
}

// bf16 keeps float32's exponent, so rounding the bit pattern is round-to-nearest-even for normals and subnormals
// alike (the same result as narrow_from_float<8, 7>, without its branches).
inline std::uint16_t bf16_from_float(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline std::uint16_t f16_from_float(float v) { return std::uint16_t(narrow_from_float<5, 10>(v)); }
inline std::uint8_t f8e4m3_from_float(float v) { return std::uint8_t(narrow_from_float<4, 3>(v)); }
inline std::uint8_t f8e5m2_from_float(float v) { return std::uint8_t(narrow_from_float<5, 2>(v)); }

inline float float_from_bf16(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }
inline float float_from_f16(std::uint16_t b) { return float_from_narrow<5, 10>(b); }
inline float float_from_f8e4m3(std::uint8_t b) { return float_from_narrow<4, 3, true>(b); }
inline float float_from_f8e5m2(std::uint8_t b) { return float_from_narrow<5, 2>(b); }

}  // namespace epk
