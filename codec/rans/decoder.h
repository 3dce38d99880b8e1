// The plain scalar decoder of a lattice-rans tensor: the oracle for the GPU decoder. It validates the stream's
// geometry and tables once, then decodes tiles independently; a tile that does not end with its read pointer at the
// tile start and every state back at 2^15 (or that runs out of words, or meets an empty table) is reported with its
// number and never written as if it were good.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/lattice/quantize.h"
#include "codec/rans/stream.h"

namespace epk::rans {

enum class TileFault : std::uint8_t {
  kNone = 0,
  kBadInitialState,  // a stored state outside [2^15, 2^31)
  kTruncated,        // the decoder needed a word before the tile's start
  kEmptyTable,       // a decoded coset selects a table with no symbols
  kUnreadWords,      // words left between the tile start and the read pointer at the end
  kBadFinalState,    // a lane's state did not return to 2^15
};
const char* tile_fault_name(TileFault f);

struct TileStatus {
  std::uint32_t tile = 0;
  TileFault fault = TileFault::kNone;
};

// Output element types: kF32, kBF16, kF16, kF8E4M3, kF8E5M2 (saturated to the finite range) and kI8 (rounded half
// to even, saturated), as the reference's snap_to_container.
bool decode_output_supported(DType t);

// Checks everything about the stream that does not need decoding: shape and layout, tile count against offsets and
// states, monotone offsets ending at the payload size, table metadata (contiguous, alphabets within 2^pb, each table's
// frequencies summing to 2^pb, symbol counts consistent across tables), row scales finite and positive.
// name (the tensor) prefixes every message.
Status validate_stream(const LatticeRansStream& s, std::string_view name);

// Decodes rows [row_begin, row_end) into out: (row_end - row_begin) * cols elements of out_type, row-major, the
// logical columns only. Only the tiles covering those rows are decoded. On corrupt tiles returns kCorruptTile naming
// the tensor and the first bad tiles; every bad tile is appended to faults when given. threads >= 1.
Status decode_rows(const LatticeRansStream& s, std::string_view name, DType out_type, std::span<std::byte> out,
                   std::uint32_t row_begin, std::uint32_t row_end, int threads = 1,
                   std::vector<TileStatus>* faults = nullptr);

// Whole tensor.
inline Status decode(const LatticeRansStream& s, std::string_view name, DType out_type, std::span<std::byte> out,
                     int threads = 1, std::vector<TileStatus>* faults = nullptr) {
  return decode_rows(s, name, out_type, out, 0, s.rows, threads, faults);
}

// Validates the stream, then decodes every tile without producing weights; returns the status of each bad tile
// (empty when all are good), or validate_stream's error.
Result<std::vector<TileStatus>> check_tiles(const LatticeRansStream& s, std::string_view name, int threads = 1);

// Decodes the fields of every vector (the sym_min offsets restored): for tests and re-encoding.
Result<lattice::QuantizedFields> decode_fields(const LatticeRansStream& s, std::string_view name);

}  // namespace epk::rans
