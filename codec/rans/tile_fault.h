// Why a lattice-rans tile did not decode, as both decoders report it: the scalar CPU decoder (codec/rans/decoder.h,
// the oracle) and the GPU decoder (codec/cuda/decode/decode.h, whose kernels write one code per tile, u8, into the
// plan's scratch). One enum for both, so that tests compare their faults directly. Host and device code include it
// (plain types, no CUDA, nothing heap-allocated).
#pragma once

#include <cstdint>
#include <string_view>

namespace epk::rans {

// The values are the per-tile status codes the GPU kernels write (0..4); the last two only the CPU decoder finds.
enum class TileFault : std::uint8_t {
  kOk = 0,
  kBadOffsets = 1,        // GPU: offsets[t] > offsets[t+1] or past the payload (the CPU decoder's validate_stream
                          // refuses such a stream before any tile; the GPU checks offsets in device memory again)
  kTruncated = 2,         // the decoder needed a word before the tile's first word
  kUnreadWords = 3,       // words left between the tile start and the read pointer at the end
  kBadFinalState = 4,     // a lane's state did not return to 2^15
  kBadInitialState = 5,   // CPU: a stored state outside [2^15, 2^31) (the GPU decodes on and ends with a fault above)
  kEmptyTable = 6,        // CPU: a decoded coset selects a table with no symbols (the GPU decodes on as above)
};

constexpr std::string_view tile_fault_name(TileFault f) {
  switch (f) {
    case TileFault::kOk: return "ok";
    case TileFault::kBadOffsets: return "offsets out of order or past the payload";
    case TileFault::kTruncated: return "payload exhausted before the last symbol";
    case TileFault::kUnreadWords: return "payload words left unread";
    case TileFault::kBadFinalState: return "final state not 2^15";
    case TileFault::kBadInitialState: return "stored state outside [2^15, 2^31)";
    case TileFault::kEmptyTable: return "decoded coset selects an empty table";
  }
  return "?";
}

// A corrupt tile: tensor (its index in a GPU plan's batch; 0 from the CPU decoder, which decodes one tensor), tile
// (its index within the tensor) and why.
struct TileFaultRecord {
  std::uint32_t tensor = 0;
  std::uint32_t tile = 0;
  TileFault fault = TileFault::kOk;
};

}  // namespace epk::rans
