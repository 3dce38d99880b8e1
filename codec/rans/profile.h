// How a lattice-rans tensor's stream metadata is stored: the reference package's six buffers, or the native
// profile's lighter form (docs/STREAM.md section 9; params `profile` = "native", a file without the key being the
// reference profile). Both expand to the same LatticeRansStream arrays, so every decoder reads one form.
#pragma once

#include <cstdint>
#include <string_view>

namespace epk::rans {

enum class StreamProfile : std::uint8_t { kReference, kNative };

constexpr std::string_view profile_name(StreamProfile p) {
  return p == StreamProfile::kNative ? "native" : "reference";
}

}  // namespace epk::rans
