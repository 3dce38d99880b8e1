// A small static-model tiled rANS for symbols of a small alphabet (2^bits symbols, bits 1..8): the intq encoding's
// `rans` form of codes (docs/FORMAT.md 11.5). Unlike the lattice-rans coder (17 coset tables, 32 interleaved lanes)
// this is one frequency table per stream and one byte-wise rANS state per tile:
//   - freqs: 2^bits u16 entries summing to exactly 2^prob_bits; a symbol that occurs has a frequency >= 1
//   - the symbols are cut into tiles of tile_symbols (the last may be shorter); each tile is coded on its own
//     (state starts and must end at kStateLow), so tiles decode in parallel
//   - a tile's bytes: the final encoder state as a little-endian u32, then the renormalisation bytes in the order
//     the decoder reads them. Decoding: x = that u32; per symbol slot = x % M, symbol s with cum[s] <= slot <
//     cum[s+1], x = freq[s] * (x >> prob_bits) + slot - cum[s]; while x < kStateLow, x = (x << 8) | next byte.
//     The tile must end with every byte read and x == kStateLow.
// Every count and size is checked before use; a bad table, a truncated tile, bytes left over or a final state other
// than kStateLow are errors naming the stream, the tile and the field, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "codec/common/result.h"

namespace epk::rans::symbols {

inline constexpr int kDefaultProbBits = 12;
inline constexpr int kMinProbBits = 8, kMaxProbBits = 15;
inline constexpr std::uint32_t kDefaultTileSymbols = 1u << 16;
inline constexpr std::uint32_t kStateLow = 1u << 23;  // states live in [2^23, 2^31): byte-wise renormalisation

struct Encoded {
  int bits = 0;
  int prob_bits = kDefaultProbBits;
  std::uint32_t tile_symbols = kDefaultTileSymbols;
  std::uint64_t count = 0;
  std::vector<std::uint16_t> freqs;       // 2^bits
  std::vector<std::uint32_t> tile_bytes;  // per tile
  std::vector<std::uint8_t> payload;      // the tiles, concatenated

  // payload + 2 bytes per frequency + 4 per tile: what the container stores.
  std::uint64_t stored_bytes() const { return payload.size() + 2 * freqs.size() + 4 * tile_bytes.size(); }
};

// The frequencies of `symbols`, scaled to sum 2^prob_bits (each present symbol >= 1). kInvalidArgument when a symbol
// is >= 2^bits.
Result<std::vector<std::uint16_t>> normalized_freqs(std::span<const std::uint8_t> symbols, int bits, int prob_bits);

Result<Encoded> encode(std::span<const std::uint8_t> symbols, int bits,
                       std::uint32_t tile_symbols = kDefaultTileSymbols, int prob_bits = kDefaultProbBits);

// A stored stream: little-endian bytes as the container keeps them (no alignment assumed).
struct StreamView {
  int bits = 0;
  int prob_bits = 0;
  std::uint32_t tile_symbols = 0;
  std::uint64_t count = 0;
  std::span<const std::uint8_t> freqs;       // 2 * 2^bits bytes
  std::span<const std::uint8_t> tile_bytes;  // 4 * ceil(count / tile_symbols) bytes
  std::span<const std::uint8_t> payload;
};
StreamView view_of(const Encoded& e);

// Decodes every symbol into out (exactly count entries). `what` names the stream in errors ("FILE: tensor 'W' intq
// buffers.codes"). kBadInput: sizes, table; kCorruptTile: a tile that runs out of bytes, leaves bytes over or does
// not end in kStateLow. Tiles are spread over `threads` threads (a slot-to-symbol table per stream).
Status decode(const StreamView& s, std::span<std::uint8_t> out, std::string_view what, int threads = 1);

// The plain reference: one tile after another, the symbol found by a linear search of the cumulative frequencies.
Status decode_reference(const StreamView& s, std::span<std::uint8_t> out, std::string_view what);

}  // namespace epk::rans::symbols
