#include "codec/serve/layout.h"

#include "codec/common/bytes.h"

namespace epk::serve {

std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::kStored: return "stored";
    case Layout::kDenseBF16: return "dense:bf16";
    case Layout::kDenseF16: return "dense:fp16";
    case Layout::kDenseF32: return "dense:fp32";
    case Layout::kRowwiseF8E4M3: return "rowwise:fp8_e4m3";
    case Layout::kRowwiseI8: return "rowwise:int8";
    case Layout::kGptq: return "gptq";
    case Layout::kGptqV2: return "gptq-v2";
    case Layout::kAwq: return "awq";
    case Layout::kMarlin: return "marlin";
  }
  return "unknown";
}

std::optional<PackedGeometry> packed_geometry_from_shape(std::span<const std::uint64_t> shape) {
  if (shape.size() != 8) return std::nullopt;
  PackedGeometry g{shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7]};
  return g;
}

std::size_t packed_parts(Layout layout, const PackedGeometry& g, DType scale_dtype,
                         std::array<PackedPart, kMaxPackedParts>* out, std::uint64_t* total) {
  // Every extent is bounded first, so no product below can overflow 64 bits.
  constexpr std::uint64_t kMaxExtent = std::uint64_t{1} << 31;
  constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 48;
  if (g.rows > g.padded_rows || g.cols > g.padded_cols || g.padded_rows > kMaxExtent || g.padded_cols > kMaxExtent ||
      g.num_groups > kMaxExtent || g.group_size == 0 || g.group_size > kMaxExtent || g.bits < 1 || g.bits > 8 ||
      (g.flags & ~(kPackedGIdx | kPackedPerm)) != 0) {
    return 0;
  }
  if (scale_dtype != DType::kF16 && scale_dtype != DType::kBF16 && scale_dtype != DType::kF32) return 0;
  const std::uint64_t kp = g.padded_rows, np = g.padded_cols, b = g.bits, ng = g.num_groups;
  std::size_t n = 0;
  std::uint64_t at = 0;
  bool ok = true;
  // ndim 1 parts have shape {d0, 0}.
  auto add = [&](std::string_view name, DType dtype, std::uint32_t ndim, std::uint64_t d0, std::uint64_t d1) {
    const std::uint64_t width = static_cast<std::uint64_t>(dtype_bits(dtype) / 8);
    std::uint64_t bytes = 0;
    if (!checked_mul(d0, ndim == 1 ? 1 : d1, &bytes) || !checked_mul(bytes, width, &bytes) || bytes > kMaxBytes) {
      ok = false;
    }
    at = align_up(at, kPackedPartAlign);
    (*out)[n++] = PackedPart{name, dtype, ndim, {d0, ndim == 1 ? 0 : d1}, at, bytes};
    at += bytes;  // at most 4 parts of at most 2^48 bytes each
  };
  switch (layout) {
    case Layout::kGptq:
    case Layout::kGptqV2:
      if ((b != 2 && b != 3 && b != 4 && b != 8) || (kp * b) % 32 != 0 || (np * b) % 32 != 0 ||
          g.flags != kPackedGIdx) {
        return 0;
      }
      add("qweight", DType::kI32, 2, kp * b / 32, np);
      add("qzeros", DType::kI32, 2, ng, np * b / 32);
      add("scales", scale_dtype, 2, ng, np);
      add("g_idx", DType::kI32, 1, kp, 0);
      break;
    case Layout::kAwq:
      if (b != 4 || np % 8 != 0 || g.flags != 0) return 0;
      add("qweight", DType::kI32, 2, kp, np / 8);
      add("qzeros", DType::kI32, 2, ng, np / 8);
      add("scales", scale_dtype, 2, ng, np);
      break;
    case Layout::kMarlin:
      if ((b != 4 && b != 8) || kp % 16 != 0 || np % 64 != 0 ||
          (g.flags != 0 && g.flags != (kPackedGIdx | kPackedPerm))) {
        return 0;
      }
      add("qweight", DType::kI32, 2, kp / 16, np * b / 2);
      add("scales", scale_dtype, 2, ng, np);
      if (g.flags != 0) {
        add("g_idx", DType::kI32, 1, kp, 0);
        add("perm", DType::kI32, 1, kp, 0);
      }
      break;
    default:
      return 0;
  }
  if (!ok) return 0;
  *total = at;
  return n;
}

std::optional<Layout> layout_from_code(std::uint32_t code) {
  if (code >= kLayoutCount) return std::nullopt;
  return static_cast<Layout>(code);
}

std::optional<Layout> layout_from_name(std::string_view name) {
  for (std::uint32_t c = 0; c < kLayoutCount; ++c) {
    if (layout_name(static_cast<Layout>(c)) == name) return static_cast<Layout>(c);
  }
  return std::nullopt;
}

}  // namespace epk::serve
