// The one place epkd turns a stored .epk tensor into values. PROVISIONAL: the per-encoding dispatch and the mapping of
// a lattice-rans tensor onto container buffers and params belong to codec (codec/decode/decode_tensor.h and
// codec/rans/container_io.h, branch `cli`); until they are merged this file reads the mapping below directly with
// codec/rans. When they land, the bodies in epk_decode.cc switch to them and this header stays.
//
// Provisional lattice-rans mapping: buffers payload u16, offsets u32, states u32, stream_meta i32[17,4], freq_tables
// u16, scales f32 (the reference's names, docs/NOTES.md), params {"rows", "cols", "padded_cols", "prob_bits",
// "tile_symbols"} (unsigned integers; more keys are ignored).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/rans/stream.h"

namespace epk::daemon {

// A view of tensor t's lattice-rans stream straight into the mapped file (no copy), every field checked: params
// present and in range, buffers present, sized in whole elements, and the stream valid (rans::validate_stream). The
// shape must be [rows, cols]. Errors name the file, the tensor and the field.
Result<rans::LatticeRansStream> lattice_stream_view(const container::Reader& reader, const container::TensorEntry& t);

// Decodes the whole stream into dst (rows * cols elements of out_type, row-major). A corrupt tile is kCorruptTile
// naming the tensor and the tile. `name` prefixes every message.
Status decode_lattice(const rans::LatticeRansStream& s, std::string_view name, DType out_type, std::span<std::byte> dst);

}  // namespace epk::daemon
