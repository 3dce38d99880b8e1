// The stored form of one EntroPack ("lattice-rans") tensor, as views into its buffers (mapped file or memory).
// Buffer names, orders and meanings follow the reference package (docs/STREAM.md section 1);
// this struct is shared by the scalar CPU decoder (the oracle) and the GPU decoder, so both read the same bytes.
#pragma once

#include <cstdint>
#include <span>

namespace epk::rans {

inline constexpr int kLanes = 32;         // interleaved rANS states per tile
inline constexpr int kTables = 17;        // table 0: coset; table 1 + 2*field + c: field (z1..z7, m) under coset c
inline constexpr int kFieldsPerVector = 9;  // coset + z1..z7 + m
inline constexpr std::uint32_t kStateLow = 1u << 15;  // initial and final state of every lane
inline constexpr std::int32_t kMaxSymbolMagnitude = 1 << 28;  // |every table symbol| (validate_stream, FORMAT.md 10.4)

// The tiles (the reference's): tile t codes vectors [t * V, min(n, (t + 1) * V)) of a tensor of n vectors, with
// V = vectors_per_tile(tile_symbols). Every encoder, decoder and size estimate counts tiles with these two.
constexpr std::uint32_t vectors_per_tile(std::uint32_t tile_symbols) {
  return tile_symbols / 9 > 32 ? tile_symbols / 9 : 32;
}
// The tiles that code vectors [0, n): ceil(n / V), at least one (a tensor of no vectors has one empty tile). For a
// row range ending at vector n > 0, the tile past its last.
constexpr std::uint64_t tiles_for_vectors(std::uint64_t n, std::uint32_t tile_symbols) {
  const std::uint64_t v = vectors_per_tile(tile_symbols);
  return n == 0 ? 1 : (n + v - 1) / v;
}

// One row of stream_meta i32[17,4].
struct TableMeta {
  std::int32_t n_symbols;
  std::int32_t sym_min;
  std::int32_t freq_offset;  // index of this table's first entry in freq_tables
  std::int32_t alphabet;     // max - min + 1
};
static_assert(sizeof(TableMeta) == 16);

struct LatticeRansStream {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;          // logical columns
  std::uint32_t padded_cols = 0;   // cols rounded up to a multiple of 8 (layout[0])
  std::uint32_t prob_bits = 0;     // layout[1]
  std::uint32_t tile_symbols = 0;  // layout[2]

  std::span<const std::uint16_t> payload;    // all tiles' words, concatenated
  std::span<const std::uint32_t> offsets;    // tiles + 1 word offsets into payload
  std::span<const std::uint32_t> states;     // tiles * 32 final encoder states
  std::span<const TableMeta> tables;         // 17
  std::span<const std::uint16_t> freq_tables;  // sum of alphabets
  std::span<const float> scales;             // rows: per-row reconstruction scale

  std::uint64_t vectors() const { return std::uint64_t(rows) * (padded_cols / 8); }
  std::uint32_t tiles() const { return offsets.empty() ? 0 : std::uint32_t(offsets.size() - 1); }
};

}  // namespace epk::rans
