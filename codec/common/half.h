// IEEE binary16 and bfloat16 <-> float32 for any input, infinities and NaN included: narrowing rounds to nearest,
// ties to even, overflows to infinity and keeps NaN quiet, as torch's .to(torch.float16 / torch.bfloat16) does.
// The rounding itself is float_convert.h's (one implementation); this header adds the non-finite and overflow cases
// that the decoders, which saturate first, never need.
#pragma once

#include <bit>
#include <cstdint>

#include "codec/common/float_convert.h"

namespace epk {

inline float f16_to_f32(std::uint16_t h) { return float_from_f16(h); }
inline float bf16_to_f32(std::uint16_t b) { return float_from_bf16(b); }

inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // quiet NaN
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // infinity, or rounds past 65504
  return f16_from_float(f);
}

inline std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return bf16_from_float(f);  // rounding the bit pattern also carries huge values to infinity correctly
}

}  // namespace epk
