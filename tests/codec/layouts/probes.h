// Three probes for any width and shape: a pattern that makes wrong axes and slot orders show
// as scrambled values, fixed-seed random codes, and all codes at their maximum (the sign bit of the top slot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace epk::layouts::testing {

enum class Probe { kPattern, kRandom, kAllOnes };
inline constexpr Probe kAllProbes[] = {Probe::kPattern, Probe::kRandom, Probe::kAllOnes};

inline const char* probe_name(Probe p) {
  switch (p) {
    case Probe::kPattern: return "pattern";
    case Probe::kRandom: return "random";
    case Probe::kAllOnes: return "all-ones";
  }
  return "?";
}

// codes [rows, cols] row-major, each below 2^bits.
inline std::vector<std::uint8_t> make_probe(Probe p, std::size_t rows, std::size_t cols, int bits,
                                            std::uint32_t seed = 0) {
  const std::uint32_t levels = 1u << bits;
  std::vector<std::uint8_t> out(rows * cols);
  std::mt19937 rng(seed);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      std::uint32_t v = 0;
      switch (p) {
        case Probe::kPattern: v = static_cast<std::uint32_t>(r * 7 + c * 3) % levels; break;
        case Probe::kRandom: v = rng() % levels; break;
        case Probe::kAllOnes: v = levels - 1; break;
      }
      out[r * cols + c] = static_cast<std::uint8_t>(v);
    }
  }
  return out;
}

}  // namespace epk::layouts::testing
