// Reconstructs one stored tensor of an .epk file into a chosen element type: the single per-encoding dispatch used by
// `epk decompress`, `epk verify` and the daemon's model source. raw: the stored bytes, converted between float
// dtypes when asked; lattice-rans: the scalar CPU decoder (codec/rans/decoder.h); intq: dequantize_intq
// (codec/layouts/intq_io.h) to F32, BF16 or F16.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/container/reader.h"
#include "codec/rans/decoder.h"

namespace epk::decode {

struct DecodeTensorOptions {
  int threads = 1;
  bool verify_checksums = false;                    // hash the tensor's buffers first (Reader::verify)
  std::vector<rans::TileFaultRecord>* faults = nullptr;  // lattice-rans: every corrupt tile is appended
};

// Whether decode_tensor can produce `out` for entry e (raw: the same dtype, or float <-> float among F32, BF16, F16,
// F8_E4M3, F8_E5M2; lattice-rans: rans::decode_output_supported).
bool can_decode(const container::TensorEntry& e, DType out);

// The dtype `epk decompress` writes e in when `requested` (--dtype) is asked or not: raw tensors keep theirs unless
// they are floating point and can be converted to it; every other encoding decodes to the request, else to its
// source dtype. kUnsupported naming `where` and the tensor when e cannot be decoded to it.
Result<DType> decompress_dtype(const container::TensorEntry& e, std::optional<DType> requested, std::string_view where);
// Whether e's one buffer already holds its elements as `out` (a raw tensor of that dtype): copied, not decoded.
bool stored_as(const container::TensorEntry& e, DType out);

// Bytes decode_tensor writes for e in dtype out (element count * bits / 8); 0 when it cannot.
std::uint64_t decoded_bytes(const container::TensorEntry& e, DType out);

// Writes e's elements, row-major, into dst (exactly decoded_bytes(e, out) bytes). Errors name the file and tensor:
// kUnsupported (encoding or dtype pair), kInvalidArgument (dst size), kBadInput (malformed params or buffers),
// kChecksum (with verify_checksums), kCorruptTile (naming the first bad tiles).
Status decode_tensor(const container::Reader& r, const container::TensorEntry& e, DType out,
                     std::span<std::uint8_t> dst, const DecodeTensorOptions& options = {});

// Rowwise serving layouts (rans::decode_rowwise): rows x cols one-byte values and one fp32 scale per row, for
// lattice-rans 2-D tensors only (kUnsupported otherwise). values holds rows * cols bytes, row_scales rows floats.
bool can_decode_rowwise(const container::TensorEntry& e);
Status decode_tensor_rowwise(const container::Reader& r, const container::TensorEntry& e, rans::RowwiseType type,
                             std::span<std::uint8_t> values, std::span<float> row_scales,
                             const DecodeTensorOptions& options = {});

// Convenience: the whole tensor as float32 (for error measurements).
Result<std::vector<float>> decode_tensor_f32(const container::Reader& r, const container::TensorEntry& e,
                                             const DecodeTensorOptions& options = {});

// Converts n elements of a raw float dtype to float32 (F32, BF16, F16, F8_E4M3, F8_E5M2, I8 as integers).
// false for other dtypes.
bool raw_to_f32(DType in, std::span<const std::uint8_t> src, std::span<float> dst);
// src (elements of raw float dtype `in`, whole ones) into dst as `out` (a pair can_decode accepts for raw tensors),
// element by element as decode_tensor converts raw tensors.
void convert_raw(DType in, std::span<const std::uint8_t> src, DType out, std::uint8_t* dst);

}  // namespace epk::decode
