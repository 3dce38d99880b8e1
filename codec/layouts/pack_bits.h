// Sub-byte code packing, the one convention every integer layout here is built on (docs/LAYOUTS.md 4.3):
// logical element i occupies bits [i*b, i*b+b) of a little-endian stream of 32-bit words, LSB first. Widths that do
// not divide 32 (3, 5, 6, 7) straddle word boundaries. A stream whose n*b is not a multiple of 32 ends in a partly
// filled word whose unused high bits are zero.
//
// Two implementations with the same contract:
//   pack_bits_ref / unpack_bits_ref: one element at a time, any width 1..8. Slow and unambiguous: the oracle.
//   pack_bits / unpack_bits: word-at-a-time paths for 2, 3, 4 and 8 bits (other widths fall back to the reference);
//     tests check them bit for bit against the oracle.
// The 2-D forms pack along rows (axis 0) of a row-major [rows, cols] matrix, one bitstream per column, as GPTQ's
// qweight does; packing along columns (axis 1) is the 1-D form applied to each row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codec/common/result.h"

namespace epk::layouts {

// Words needed for n codes of `bits` bits: ceil(n * bits / 32).
constexpr std::size_t packed_words(std::size_t n, int bits) {
  return (n * static_cast<std::size_t>(bits) + 31) / 32;
}

// Codes must be below 2^bits; words.size() must be packed_words(codes.size(), bits) and codes.size() for unpack.
// Errors (kInvalidArgument) name the violated condition; nothing is written on error.
Status pack_bits_ref(std::span<const std::uint8_t> codes, int bits, std::span<std::uint32_t> words);
Status unpack_bits_ref(std::span<const std::uint32_t> words, int bits, std::span<std::uint8_t> codes);

Status pack_bits(std::span<const std::uint8_t> codes, int bits, std::span<std::uint32_t> words);
Status unpack_bits(std::span<const std::uint32_t> words, int bits, std::span<std::uint8_t> codes);

// Along axis 0: codes [rows, cols] row-major -> words [packed_words(rows, bits), cols]; column c's stream is
// words[w * cols + c] for w = 0, 1, ...  _ref gathers each column and uses pack_bits_ref.
Status pack_rows_ref(std::span<const std::uint8_t> codes, std::size_t rows, std::size_t cols, int bits,
                     std::span<std::uint32_t> words);
Status unpack_rows_ref(std::span<const std::uint32_t> words, std::size_t rows, std::size_t cols, int bits,
                       std::span<std::uint8_t> codes);
// Fast forms (the inner loop runs across columns, so it vectorises for every width).
Status pack_rows(std::span<const std::uint8_t> codes, std::size_t rows, std::size_t cols, int bits,
                 std::span<std::uint32_t> words);
Status unpack_rows(std::span<const std::uint32_t> words, std::size_t rows, std::size_t cols, int bits,
                   std::span<std::uint8_t> codes);

}  // namespace epk::layouts
