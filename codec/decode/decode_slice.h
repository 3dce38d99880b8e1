// A slice of one stored tensor along dimension 0 (rows) or 1 (columns), decoded without producing the whole tensor:
// what epkd's CPU path serves for tensor-parallel shards (daemon/sources/epk_source.cc). The result is the slice, compact
// and row-major, bit-equal to the same slice of decode_tensor's (or decode_tensor_rowwise's) output.
//   raw           the slice's runs read from the stored bytes (converted as decode_tensor converts)
//   lattice-rans  rows [r0, r1): only the tiles covering those rows (rans::decode_rows). Columns [c0, c1): every row
//                 is needed, so the rows are decoded in bands of about kSliceBandBytes of output into a buffer of
//                 that size and only the slice's columns are kept: the tiles' decode work of the whole tensor (a
//                 tile straddling two bands is decoded twice), the write and memory traffic of the slice alone.
// Other encodings (intq) are kUnsupported here: the caller decodes the whole tensor and slices it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/rans/decoder.h"

namespace epk::decode {

inline constexpr std::uint64_t kSliceBandBytes = std::uint64_t{4} << 20;

struct Slice {
  std::size_t axis = 0;  // 0: rows (dimension 0), 1: columns (dimension 1)
  std::uint64_t begin = 0, end = 0;
};

// Whether decode_tensor_slice serves entry e in dtype out along `axis` (raw of any rank > axis with whole-byte
// elements, lattice-rans 2-D; the dtype pair as can_decode).
bool can_decode_slice(const container::TensorEntry& e, DType out, std::size_t axis);

// dst holds exactly the slice's elements of `out`. kInvalidArgument for a slice outside the shape or a dst of
// another size; kCorruptTile as decode_tensor. band_bytes: the column slices' band buffer (at least one row).
Status decode_tensor_slice(const container::Reader& r, const container::TensorEntry& e, DType out, const Slice& slice,
                           std::span<std::uint8_t> dst, std::uint64_t band_bytes = kSliceBandBytes);

// The rowwise layouts' slice (lattice-rans 2-D): values (the slice's rows' x cols' bytes) and row_scales (one per
// row of the slice: a column slice keeps every row's scale, which does not depend on the columns).
Status decode_tensor_rowwise_slice(const container::Reader& r, const container::TensorEntry& e,
                                   rans::RowwiseType type, const Slice& slice, std::span<std::uint8_t> values,
                                   std::span<float> row_scales, std::uint64_t band_bytes = kSliceBandBytes);

}  // namespace epk::decode
