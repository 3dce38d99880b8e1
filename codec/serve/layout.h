// Serving layouts a client can ask for (docs/LAYOUTS.md). Stored on the wire: never
// renumber, only append.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "codec/common/dtype.h"

namespace epk::serve {

enum class Layout : std::uint32_t {
  kStored = 0,  // raw tensors as stored
  kDenseBF16 = 1,
  kDenseF16 = 2,
  kDenseF32 = 3,
  kRowwiseF8E4M3 = 4,  // values plus a per-row fp32 scale
  kRowwiseI8 = 5,
  kGptq = 6,    // packed integer layouts of intq tensors: several parts in one slot (packed_parts below)
  kGptqV2 = 7,
  kAwq = 8,
  kMarlin = 9,
};
inline constexpr std::uint32_t kLayoutCount = 10;

// Rowwise layouts: a slot holds rows x cols one-byte values (int8 or fp8 e4m3, row-major), then, at
// rowwise_scales_offset(rows, cols) bytes from the slot's start, rows fp32 scales; weight = value * scale[row].
// The acquire reply's shape is [rows, cols] and its bytes cover both parts.
inline constexpr std::uint64_t kRowwiseScalesAlign = 64;
inline constexpr std::uint64_t rowwise_scales_offset(std::uint64_t rows, std::uint64_t cols) {
  return (rows * cols + kRowwiseScalesAlign - 1) / kRowwiseScalesAlign * kRowwiseScalesAlign;
}
inline constexpr bool is_rowwise(Layout l) { return l == Layout::kRowwiseF8E4M3 || l == Layout::kRowwiseI8; }

// Packed integer layouts (intq tensors imported from GPTQ/AWQ/compressed-tensors/GGUF Q4_0/Q8_0 checkpoints):
//   gptq     AutoGPTQ's checkpoint_format "gptq" (v1: qzeros store z - 1), what exllama/vLLM gptq kernels read
//   gptq-v2  GPTQModel's "gptq_v2" (qzeros store z); the only GPTQ form of an asymmetric tensor with a zero of 0
//   awq      AutoAWQ GEMM (4-bit, contiguous groups: an act-order tensor is refused, its activations would need a
//            permutation that this layout cannot carry)
//   marlin   vLLM gptq_marlin (4/8-bit symmetric; act-order tensors come with g_idx and perm parts)
// The acquire reply describes the slot instead of one array: dtype is the scales' dtype (F16, BF16 or F32), ndim is
// 8, strides are 0, and shape is the PackedGeometry below, in its field order. The slot holds the layout's parts one
// after another in the order packed_parts() lists them: part 0 at offset 0, every next part at the end of the
// previous one rounded up to 64 bytes (the gap is zeroed); the slot's bytes end with the last part. Parts are what
// codec/layouts' writers produce from the stored logical tensor (write_layout), little-endian:
//   gptq, gptq-v2  qweight I32 [padded_rows * bits / 32, padded_cols], qzeros I32 [num_groups, padded_cols * bits /
//                  32], scales [num_groups, padded_cols], g_idx I32 [padded_rows]
//   awq            qweight I32 [padded_rows, padded_cols / 8], qzeros I32 [num_groups, padded_cols / 8],
//                  scales [num_groups, padded_cols]
//   marlin         qweight I32 [padded_rows / 16, padded_cols * bits / 2], scales [num_groups, padded_cols], then
//                  when flags has kPackedGIdx and kPackedPerm: g_idx I32 [padded_rows], perm I32 [padded_rows]
inline constexpr std::uint64_t kPackedPartAlign = 64;
inline constexpr std::uint64_t kPackedGIdx = 1;  // flags: a g_idx part
inline constexpr std::uint64_t kPackedPerm = 2;  // flags: a perm part (activations are gathered through it)
inline constexpr bool is_packed_int(Layout l) {
  return l == Layout::kGptq || l == Layout::kGptqV2 || l == Layout::kAwq || l == Layout::kMarlin;
}

struct PackedGeometry {
  std::uint64_t cols = 0, rows = 0;                // logical N (out_features), K (in_features)
  std::uint64_t padded_cols = 0, padded_rows = 0;  // the parts' extents (the layout's padding included)
  std::uint64_t bits = 0, group_size = 0, num_groups = 0, flags = 0;

  std::array<std::uint64_t, 8> to_shape() const {
    return {cols, rows, padded_cols, padded_rows, bits, group_size, num_groups, flags};
  }
};
std::optional<PackedGeometry> packed_geometry_from_shape(std::span<const std::uint64_t> shape);

struct PackedPart {
  std::string_view name;  // "qweight", "qzeros", "scales", "g_idx", "perm"
  DType dtype = DType::kI32;
  std::uint32_t ndim = 2;
  std::array<std::uint64_t, 2> shape{};  // {extent, 0} when ndim is 1
  std::uint64_t offset = 0, bytes = 0;
};
inline constexpr std::size_t kMaxPackedParts = 4;

// The parts of `layout` for geometry g with scales in scale_dtype, written to out; returns how many (0 when the
// geometry does not fit the layout: bits, divisibility, flags, a size past 2^48 bytes). *total receives the slot's
// bytes.
std::size_t packed_parts(Layout layout, const PackedGeometry& g, DType scale_dtype,
                         std::array<PackedPart, kMaxPackedParts>* out, std::uint64_t* total);

std::string_view layout_name(Layout l);  // "stored", "dense:bf16", "rowwise:int8", "gptq", ...
std::optional<Layout> layout_from_name(std::string_view name);
std::optional<Layout> layout_from_code(std::uint32_t code);

}  // namespace epk::serve
