// The tiled interleaved rANS encoder: builds the 17 normalised tables from the fields' counts and codes every tile
// as the reference package does, so its buffers are byte-identical to the reference's for the same fields.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/common/result.h"
#include "codec/lattice/quantize.h"
#include "codec/model/tables.h"
#include "codec/rans/encoded_tensor.h"

namespace epk::rans {

struct EncodeGeometry {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;  // logical columns; padded to a multiple of 8
  std::uint32_t prob_bits = 11;
  std::uint32_t tile_symbols = 16384;
  DType dtype = DType::kF32;
};

// An EncodedTensor holding g's geometry, before its scales, tables and streams (what every encoder of fields starts
// from). Errors: an empty shape, prob_bits outside 9..15, tile_symbols 0.
Result<EncodedTensor> encoded_geometry(const EncodeGeometry& g);

// The 17 tables' metadata and normalised frequencies (out.tables, out.freq_tables) from the fields' counts, as
// encode_fields stores them. Errors: a table whose alphabet exceeds 2^prob_bits (naming it).
Status build_tables(const model::FieldCounts& counts, std::uint32_t prob_bits, EncodedTensor& out);

// Codes fields (rows * padded_cols / 8 vectors) with row scales (rows). threads >= 1 splits the tiles.
// Errors: sizes that disagree, prob_bits outside 9..15, a table alphabet above 2^prob_bits.
Result<EncodedTensor> encode_fields(const lattice::QuantizedFields& fields, std::vector<float> scales,
                                    const EncodeGeometry& geometry, int threads = 1);

}  // namespace epk::rans
