// The serving layouts as the wire and its users name them (epk::shm). What a layout is (its codes, the rowwise and
// packed slot rules) is codec/serve/layout.h's: the serving layer in codec/ sizes and writes slots by it, and codec/
// may not include shm/. This header only brings those names into epk::shm, where the protocol uses them.
#pragma once

#include "codec/serve/layout.h"

namespace epk::shm {

using serve::is_packed_int;
using serve::is_rowwise;
using serve::kLayoutCount;
using serve::kMaxPackedParts;
using serve::kPackedGIdx;
using serve::kPackedPartAlign;
using serve::kPackedPerm;
using serve::kRowwiseScalesAlign;
using serve::Layout;
using serve::layout_from_code;
using serve::layout_from_name;
using serve::layout_name;
using serve::packed_geometry_from_shape;
using serve::packed_parts;
using serve::PackedGeometry;
using serve::PackedPart;
using serve::rowwise_scales_offset;

}  // namespace epk::shm
