// How long a tensor's tiles are (tile_symbols, docs/STREAM.md section 4) when the caller leaves it to the encoder.
#pragma once

#include <cstdint>

#include "codec/rans/profile.h"

namespace epk::rate {

// A GPU decodes one tensor no faster for having more tiles than its SMs run at once: on an H100 and an H200 at 4 bpp,
// 28672x8192 decodes in 297-302 us from 16132, 8066 and 4033 tiles (tiles 1, 2 and 4 times the default length), while
// 14336x4096 takes 88 us from its 4033 and 105-107 us from 2017; at 2 bpp 28672x8192 takes 296-297 us from 8066 and
// 4033 tiles and 373 us from 2017 (docs/measurements/gpu-decode.md, "Tile length"). Longer tiles spend fewer bits
// on chain metadata, so the same stored rate leaves more to the payload (iid Gaussian at 4 bpp: 7.18%, 7.08%, 7.03%
// relative L2 at 1, 2 and 4 times).
inline constexpr std::uint64_t kFillingTiles = 4000;
inline constexpr std::uint32_t kMaxTileMultiple = 4;  // the longest measured

// The reference profile: the reference package's length for the rate (model::default_tile_symbols), so its files
// are what that package writes. The native profile up to 7 bpp (prob_bits 11, the decoder's packed tables): that
// length doubled while the tensor keeps at least kFillingTiles tiles, up to kMaxTileMultiple times; a tensor too
// small to fill a GPU keeps the default, since its decode time follows the length of one tile's chains. Above 7 bpp
// (prob_bits 12, two-level tables) the default: longer tiles there were slower even at 5402 tiles (10240x3840 at
// 8 bpp: 92.4 against 99.6 us), and a finer scale's wider alphabets can leave the tables no room beside the rings.
// `vectors`: the tensor's E8 vectors (rows * padded_cols / 8). A native tensor whose scales do not fit the profile
// (EncodeReport::profile_note) is stored in the reference profile with the length it was coded with: the reference
// stream records tile_symbols, so its decoders read any length.
std::uint32_t tile_symbols_for(double target_bpp, std::uint64_t vectors, rans::StreamProfile profile);

}  // namespace epk::rate
