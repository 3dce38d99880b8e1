// The encoder's tile length (codec/rate/tile_length.h): the reference profile keeps the reference's length; the
// native profile up to 7 bpp doubles it while the tensor keeps kFillingTiles tiles, at most kMaxTileMultiple times.
#include <gtest/gtest.h>

#include "codec/model/tables.h"
#include "codec/rans/stream.h"
#include "codec/rate/tile_length.h"

namespace epk::rate {
namespace {

using rans::StreamProfile;

std::uint64_t vectors_of(std::uint64_t rows, std::uint64_t cols) { return rows * ((cols + 7) / 8 * 8) / 8; }

TEST(TileLength, TheReferenceProfileKeepsTheReferencesLength) {
  for (double bpp : {1.5, 2.0, 4.0, 6.5, 8.0}) {
    EXPECT_EQ(tile_symbols_for(bpp, vectors_of(28672, 8192), StreamProfile::kReference),
              model::default_tile_symbols(bpp));
    EXPECT_EQ(tile_symbols_for(bpp, 1, StreamProfile::kReference), model::default_tile_symbols(bpp));
  }
}

TEST(TileLength, NativeTilesGrowOnlyWhileTheTensorStillFillsAGpuAndOnlyUpTo7Bpp) {
  // 8B-class shapes keep the default: 14336x4096 has 4033 tiles at 4 bpp, 2017 at twice the length.
  EXPECT_EQ(tile_symbols_for(4.0, vectors_of(4096, 4096), StreamProfile::kNative), 16384u);
  EXPECT_EQ(tile_symbols_for(4.0, vectors_of(14336, 4096), StreamProfile::kNative), 16384u);
  EXPECT_EQ(tile_symbols_for(4.0, 0, StreamProfile::kNative), 16384u);
  // 28672x8192 (16132 tiles) takes four times, and no more: kMaxTileMultiple.
  EXPECT_EQ(tile_symbols_for(4.0, vectors_of(28672, 8192), StreamProfile::kNative), 65536u);
  EXPECT_EQ(tile_symbols_for(4.0, vectors_of(1u << 20, 8192), StreamProfile::kNative), 65536u);
  // 2 bpp's default tiles are twice as long (32768 symbols): 28672x8192 has 8066, so it doubles once.
  EXPECT_EQ(tile_symbols_for(2.0, vectors_of(14336, 4096), StreamProfile::kNative), 32768u);
  EXPECT_EQ(tile_symbols_for(2.0, vectors_of(28672, 8192), StreamProfile::kNative), 65536u);
  // 7 bpp is the last rate of prob_bits 11 (8192 symbols a tile: 14336x4096 has 8066, so it doubles once); above it
  // the default at any size.
  EXPECT_EQ(tile_symbols_for(7.0, vectors_of(14336, 4096), StreamProfile::kNative), 16384u);
  EXPECT_EQ(tile_symbols_for(7.5, vectors_of(28672, 8192), StreamProfile::kNative), 4096u);
  EXPECT_EQ(tile_symbols_for(8.0, vectors_of(28672, 8192), StreamProfile::kNative), 4096u);
}

TEST(TileLength, TheThresholdIsTheTileCountAtTheLongerLength) {
  const std::uint64_t per_doubled_tile = rans::vectors_per_tile(2 * 16384);  // 3640 vectors
  const std::uint64_t at_threshold = per_doubled_tile * (kFillingTiles - 1) + 1;  // kFillingTiles tiles doubled
  ASSERT_EQ(rans::tiles_for_vectors(at_threshold, 2 * 16384), kFillingTiles);
  EXPECT_EQ(tile_symbols_for(4.0, at_threshold, StreamProfile::kNative), 2u * 16384u);
  EXPECT_EQ(tile_symbols_for(4.0, at_threshold - 1, StreamProfile::kNative), 16384u);
  for (std::uint64_t v : {std::uint64_t(1), at_threshold - 1, at_threshold, at_threshold * 4, std::uint64_t(1) << 34}) {
    const std::uint32_t t = tile_symbols_for(4.0, v, StreamProfile::kNative);
    EXPECT_TRUE(t == 16384u || rans::tiles_for_vectors(v, t) >= kFillingTiles) << v;
    EXPECT_LE(t, kMaxTileMultiple * 16384u) << v;
  }
}

}  // namespace
}  // namespace epk::rate
