// Scalar conversions between float32 and the 16-bit float formats (round to nearest even, NaN kept quiet).
// Plain and exact: the CPU codec and the tools use them, and GPU kernels are tested against them.
#pragma once

#include <bit>
#include <cstdint>

namespace epk {

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

}  // namespace epk
