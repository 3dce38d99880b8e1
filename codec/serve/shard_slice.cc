#include "codec/serve/shard_slice.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace epk::serve {

Result<Slot> shard_slot(const Slot& whole, Layout layout, const ShardRange& shard,
                  std::string_view origin, std::string_view tensor) {
  if (shard.whole()) return whole;
  auto what = [&] { return std::string(origin) + ": tensor '" + std::string(tensor) + "'"; };
  if (is_packed_int(layout)) {
    return make_error(ErrorCode::kUnsupported, what() + ": layout " + std::string(layout_name(layout)) +
                                                   " is not sharded by this source");
  }
  const std::size_t axis = shard.axis();
  if (axis >= whole.shape.size() || shard.end > whole.shape[axis]) {  // resolve_shard checked it against the same shape
    return make_error(ErrorCode::kInternal, what() + ": shard " + describe(shard) +
                                                " outside the served shape");
  }
  Slot out = whole;
  out.shape[axis] = shard.extent();
  out.strides = row_major_strides(out.shape.span());
  if (is_rowwise(layout)) {
    const std::uint64_t rows = out.shape[0], cols = out.shape[1];
    out.bytes = rowwise_scales_offset(rows, cols) + rows * 4;
    return out;
  }
  std::uint64_t elements = 1;
  for (std::uint64_t d : out.shape) elements *= d;
  const SliceGeometry g = slice_geometry(whole.shape.span(), axis);
  const auto bits = static_cast<std::uint64_t>(dtype_bits(whole.dtype));
  if (bits == 0 || (g.inner * bits) % 8 != 0) {
    return make_error(ErrorCode::kUnsupported, what() + ": a shard of " +
                                                   std::string(dtype_name(whole.dtype)) + " along " +
                                                   std::string(shard_dim_name(shard.dim)) +
                                                   " does not fall on whole bytes");
  }
  out.bytes = elements * bits / 8;
  return out;
}

Status slice_served(const Slot& whole, Layout layout, const ShardRange& shard,
                    std::span<const std::uint8_t> whole_bytes, std::span<std::uint8_t> dst) {
  EPK_TRY_ASSIGN(Slot part, shard_slot(whole, layout, shard, "slice", ""));
  if (whole_bytes.size() != whole.bytes || dst.size() != part.bytes) {
    return make_error(ErrorCode::kInvalidArgument, "slice: buffer sizes do not match the served tensors");
  }
  if (shard.whole()) {
    std::copy(whole_bytes.begin(), whole_bytes.end(), dst.begin());
    return {};
  }
  const SliceGeometry g = slice_geometry(whole.shape.span(), shard.axis());
  const std::uint64_t elem_bits = is_rowwise(layout) ? 8 : static_cast<std::uint64_t>(dtype_bits(whole.dtype));
  const std::uint64_t run = shard.extent() * g.inner * elem_bits / 8;    // bytes of one outer index's slice
  const std::uint64_t stride = g.extent * g.inner * elem_bits / 8;       // bytes of one outer index in the whole
  const std::uint64_t skip = shard.begin * g.inner * elem_bits / 8;
  for (std::uint64_t o = 0; o < g.outer; ++o) {
    std::memcpy(dst.data() + o * run, whole_bytes.data() + o * stride + skip, run);
  }
  if (is_rowwise(layout)) {
    const std::uint64_t rows = whole.shape[0], cols = whole.shape[1];
    const std::uint64_t prow = part.shape[0], pcols = part.shape[1];
    const std::uint64_t at = rowwise_scales_offset(prow, pcols);
    std::fill(dst.begin() + static_cast<std::ptrdiff_t>(prow * pcols), dst.begin() + static_cast<std::ptrdiff_t>(at),
              0);
    const std::uint64_t from = shard.dim == ShardDim::kRows ? shard.begin : 0;
    std::memcpy(dst.data() + at, whole_bytes.data() + rowwise_scales_offset(rows, cols) + from * 4, prow * 4);
  }
  return {};
}

}  // namespace epk::serve
