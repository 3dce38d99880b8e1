// The owning form of one EntroPack tensor: the seven buffers of the reference container plus its shape and source
// dtype. view() hands the decoders (CPU oracle and GPU) the non-owning LatticeRansStream over the same bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/common/block_recycler.h"
#include "codec/common/default_init_allocator.h"
#include "codec/common/dtype.h"
#include "codec/rans/stream.h"

namespace epk::rans {

// The payload's words: resize() leaves new words unwritten (every encoder writes each word it sizes), and large
// payloads' blocks are recycled within the process (codec/common/block_recycler.h).
using PayloadWords =
    std::vector<std::uint16_t, DefaultInitAllocator<std::uint16_t, RecyclingAllocator<std::uint16_t>>>;

struct EncodedTensor {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::uint32_t padded_cols = 0;
  std::uint32_t prob_bits = 0;
  std::uint32_t tile_symbols = 0;
  DType dtype = DType::kF32;  // the source dtype; the reference's default output dtype

  PayloadWords payload;
  std::vector<std::uint32_t> offsets;      // tiles + 1
  std::vector<std::uint32_t> states;       // tiles * 32
  std::vector<TableMeta> tables;           // kTables
  std::vector<std::uint16_t> freq_tables;
  std::vector<float> scales;               // rows

  LatticeRansStream view() const {
    LatticeRansStream s;
    s.rows = rows;
    s.cols = cols;
    s.padded_cols = padded_cols;
    s.prob_bits = prob_bits;
    s.tile_symbols = tile_symbols;
    s.payload = payload;
    s.offsets = offsets;
    s.states = states;
    s.tables = tables;
    s.freq_tables = freq_tables;
    s.scales = scales;
    return s;
  }

  // Bytes of the seven buffers as the reference stores them (layout is i64[3]); its JSON header and 16-byte
  // alignment come on top (reference_quant_state_bytes in reference_format.h counts those).
  std::uint64_t buffer_bytes() const {
    return payload.size() * 2 + offsets.size() * 4 + states.size() * 4 + tables.size() * sizeof(TableMeta) +
           freq_tables.size() * 2 + scales.size() * 4 + 3 * 8;
  }
};

}  // namespace epk::rans
