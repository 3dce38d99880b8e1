// Plain scalar CPU decoder with the GPU decoder's output formats: the reference its kernel is tested against bit for
// bit (tests/codec/cuda). It walks the stream exactly as ENTROPACK.md ("Tiled rANS") describes, one lane at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/common/result.h"
#include "codec/cuda/decode.h"
#include "codec/rans/stream.h"

namespace epk::cuda {

// Decodes rows [row_begin, row_end) (row_end 0: all) into out (row-major, output_element_bytes(format) per element).
// row_scales receives one float per row for kInt8Rowwise. Corrupt tiles are listed in faults (their outputs are
// still written, as the GPU does); the call fails only on malformed geometry.
Status decode_reference(const rans::LatticeRansStream& stream, OutputFormat format, std::uint32_t row_begin,
                        std::uint32_t row_end, std::span<std::uint8_t> out, std::span<float> row_scales,
                        std::vector<TileFaultRecord>* faults);

// The scalar conversions used by decode_reference (independent of the CUDA headers).
std::uint16_t float_to_bf16_bits(float v);
std::uint16_t float_to_fp16_bits(float v);     // clamps to +-65504
std::uint8_t float_to_e4m3_bits(float v);      // clamps to +-448
std::uint8_t float_to_e5m2_bits(float v);      // clamps to +-57344

}  // namespace epk::cuda
