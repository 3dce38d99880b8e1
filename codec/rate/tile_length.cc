#include "codec/rate/tile_length.h"

#include "codec/model/tables.h"
#include "codec/rans/stream.h"

namespace epk::rate {

std::uint32_t tile_symbols_for(double target_bpp, std::uint64_t vectors, rans::StreamProfile profile) {
  const std::uint32_t base = model::default_tile_symbols(target_bpp);
  if (profile != rans::StreamProfile::kNative || model::initial_prob_bits(target_bpp) != 11) return base;
  std::uint32_t multiple = 1;
  while (multiple < kMaxTileMultiple && rans::tiles_for_vectors(vectors, base * multiple * 2) >= kFillingTiles) {
    multiple *= 2;
  }
  return base * multiple;
}

}  // namespace epk::rate
