// Interop with the reference package's stored form of a lattice_rans tensor (entropack 0.1.5): its state_dict holds
// one uint8 tensor per compressed tensor (key `{leaf}`, default "entropack_quant_state") laid out as
//   1. u64 little-endian length L of the JSON header;
//   2. L bytes of JSON, keys sorted, compact: {buffer_dtypes, buffer_names, buffer_shapes, compress_method, dtype,
//      header: {compress_method}, shape};
//   3. each buffer in buffer_names order, starting at a multiple of 16 bytes (zero padding), the blob ending at the
//      last buffer's end rounded up to 16.
// Buffers: payload u16[words], offsets u32[tiles+1], states u32[tiles,32], stream_meta i32[17,4], freq_tables u16[n],
// scales f32[rows], layout i64[3] (padded cols, prob bits, tile symbols).
// An older `{prefix}header` / `{prefix}buffers.*` state_dict form is not what 0.1.5 writes; these functions read and
// write the single blob above (docs/STREAM.md section 8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/rans/encoded_tensor.h"

namespace epk::rans {

inline constexpr std::string_view kReferenceLeaf = "entropack_quant_state";

// torch dtype names as the reference's JSON spells them ("bfloat16", "float8_e4m3fn", ...).
std::optional<std::string_view> reference_dtype_name(DType t);
std::optional<DType> dtype_from_reference_name(std::string_view name);

// Parses a quant_state blob into an owning tensor, checking every length, dtype, shape and offset against the bytes
// present, then the stream itself (validate_stream). name (the tensor) prefixes every error message. A blob whose
// compress_method is not "lattice_rans" (the reference's raw fallback) is kUnsupported.
Result<EncodedTensor> parse_reference_quant_state(std::span<const std::byte> blob, std::string_view name);

// The blob the reference would write for this tensor: byte-identical to its own for identical buffers.
Result<std::vector<std::byte>> write_reference_quant_state(const EncodedTensor& t);

// Size of that blob (the reference's storage_nbytes, from which it computes actual_bpp).
std::uint64_t reference_quant_state_bytes(const EncodedTensor& t);

}  // namespace epk::rans
