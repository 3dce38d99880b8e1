// The "int" kind's values at the code width (not public API; docs/FORMAT.md 11.2 and 11.5). Codes and zeros are
// packed LSB-first into little-endian u32 words (pack_bits.h), the bits past the last value zero. Codes may instead
// be rANS-coded (codec/rans/symbol_coder.h): buffer codes holds the tiles' bytes, code_freqs the u16 frequency table,
// code_tiles the u32 tile sizes, and params code_prob_bits and code_tile_symbols the stream's parameters.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/layouts/intq_entry.h"
#include "codec/rans/symbol_coder.h"

namespace epk::layouts::intq::detail {

// Appends buffer `name`: `values` (each below 2^bits) packed. Errors are pack_bits'.
Status add_packed(Encoded& e, std::string name, std::span<const std::uint8_t> values, int bits);
// Appends the buffers codes, code_freqs and code_tiles of `coded` and sets params codes = "rans" and the stream's
// parameters.
void add_rans_codes(Encoded& e, json& params, rans::symbols::Encoded coded);

// The `n` values of `bits` packed in `bytes` (buffer `field`, whose size the caller has checked), refusing set bits
// past the last value.
Status unpack_checked(const Where& w, std::string_view field, std::span<const std::uint8_t> bytes, std::size_t n,
                      int bits, std::vector<std::uint8_t>* out);
// The `count` rANS-coded codes of the entry's buffers codes, code_freqs and code_tiles; out is resized to count.
Status decode_rans_codes(const Where& w, int bits, int prob_bits, std::uint32_t tile_symbols, std::uint64_t count,
                         std::vector<std::uint8_t>* out);

}  // namespace epk::layouts::intq::detail
