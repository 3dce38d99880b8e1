// Serving layouts a client can ask for (../shared/docs/DESIGN.md, "Serving layouts"). Stored on the wire: never
// renumber, only append.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace epk::shm {

enum class Layout : std::uint32_t {
  kStored = 0,  // raw tensors as stored
  kDenseBF16 = 1,
  kDenseF16 = 2,
  kDenseF32 = 3,
  kRowwiseF8E4M3 = 4,  // values plus a per-row fp32 scale
  kRowwiseI8 = 5,
};
inline constexpr std::uint32_t kLayoutCount = 6;

// Rowwise layouts: a slot holds rows x cols one-byte values (int8 or fp8 e4m3, row-major), then, at
// rowwise_scales_offset(rows, cols) bytes from the slot's start, rows fp32 scales; weight = value * scale[row].
// The acquire reply's shape is [rows, cols] and its bytes cover both parts.
inline constexpr std::uint64_t kRowwiseScalesAlign = 64;
inline constexpr std::uint64_t rowwise_scales_offset(std::uint64_t rows, std::uint64_t cols) {
  return (rows * cols + kRowwiseScalesAlign - 1) / kRowwiseScalesAlign * kRowwiseScalesAlign;
}
inline constexpr bool is_rowwise(Layout l) { return l == Layout::kRowwiseF8E4M3 || l == Layout::kRowwiseI8; }

std::string_view layout_name(Layout l);  // "stored", "dense:bf16", "rowwise:int8", ...
std::optional<Layout> layout_from_name(std::string_view name);
std::optional<Layout> layout_from_code(std::uint32_t code);

}  // namespace epk::shm
