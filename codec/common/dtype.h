// Element types: every dtype safetensors knows, with their names and bit widths.
// The numeric values are stored in .epk files: never renumber, only append.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace epk {

enum class DType : std::uint8_t {
  kBool = 0,
  kU8 = 1,
  kI8 = 2,
  kF8E5M2 = 3,
  kF8E4M3 = 4,
  kF8E8M0 = 5,
  kI16 = 6,
  kU16 = 7,
  kF16 = 8,
  kBF16 = 9,
  kI32 = 10,
  kU32 = 11,
  kF32 = 12,
  kF64 = 13,
  kI64 = 14,
  kU64 = 15,
  kF4 = 16,      // fp4 e2m1, two per byte
  kF6E2M3 = 17,  // fp6, packed
  kF6E3M2 = 18,
};
inline constexpr int kDTypeCount = 19;

// Bits one element occupies (1 byte for BOOL, 4 for F4, 6 for the F6 types).
int dtype_bits(DType t);
// The safetensors spelling: "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// Decodes the stored byte of an .epk index; nullopt for values this build does not know.
std::optional<DType> dtype_from_code(std::uint32_t code);
bool dtype_is_float(DType t);

}  // namespace epk
