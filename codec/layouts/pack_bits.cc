#include "codec/layouts/pack_bits.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/common/bytes.h"

namespace epk::layouts {
namespace {

Status check_bits(int bits) {
  if (bits < 1 || bits > 8) {
    return make_error(ErrorCode::kInvalidArgument, "pack_bits: width " + std::to_string(bits) + " outside 1..8");
  }
  return {};
}

Status check_codes(std::span<const std::uint8_t> codes, int bits) {
  std::uint8_t all = 0;
  for (std::uint8_t c : codes) all |= c;  // vectorises; the position is only looked for on error
  if ((all >> bits) == 0) return {};
  for (std::size_t i = 0; i < codes.size(); ++i) {
    if ((codes[i] >> bits) != 0) {
      return make_error(ErrorCode::kInvalidArgument, "pack_bits: code " + std::to_string(codes[i]) + " at index " +
                                                         std::to_string(i) + " does not fit " +
                                                         std::to_string(bits) + " bits");
    }
  }
  return {};
}

Status check_sizes(std::size_t n, std::size_t n_words, int bits, const char* who) {
  if (n_words != packed_words(n, bits)) {
    return make_error(ErrorCode::kInvalidArgument, std::string(who) + ": " + std::to_string(n) + " codes of " +
                                                       std::to_string(bits) + " bits need " +
                                                       std::to_string(packed_words(n, bits)) + " words, got " +
                                                       std::to_string(n_words));
  }
  return {};
}

void pack_ref_unchecked(const std::uint8_t* codes, std::size_t n, int bits, std::uint32_t* words) {
  std::fill(words, words + packed_words(n, bits), 0u);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t pos = i * static_cast<std::size_t>(bits);
    std::size_t w = pos / 32;
    unsigned off = static_cast<unsigned>(pos % 32);
    std::uint32_t v = codes[i];
    words[w] |= v << off;
    if (off + static_cast<unsigned>(bits) > 32) words[w + 1] |= v >> (32 - off);
  }
}

void unpack_ref_unchecked(const std::uint32_t* words, int bits, std::uint8_t* codes, std::size_t n) {
  const std::uint32_t mask = (1u << bits) - 1u;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t pos = i * static_cast<std::size_t>(bits);
    std::size_t w = pos / 32;
    unsigned off = static_cast<unsigned>(pos % 32);
    std::uint32_t v = words[w] >> off;
    if (off + static_cast<unsigned>(bits) > 32) v |= words[w + 1] << (32 - off);
    codes[i] = static_cast<std::uint8_t>(v & mask);
  }
}

// Widths dividing 32: each word holds 32/B whole codes.
template <int B>
void pack_divisor(const std::uint8_t* codes, std::size_t n_words, std::uint32_t* words) {
  constexpr int kPer = 32 / B;
  for (std::size_t w = 0; w < n_words; ++w) {
    const std::uint8_t* c = codes + w * kPer;
    std::uint32_t acc = 0;
    for (int j = 0; j < kPer; ++j) acc |= static_cast<std::uint32_t>(c[j]) << (B * j);
    words[w] = acc;
  }
}

template <int B>
void unpack_divisor(const std::uint32_t* words, std::size_t n_words, std::uint8_t* codes) {
  constexpr int kPer = 32 / B;
  constexpr std::uint32_t kMask = (1u << B) - 1u;
  for (std::size_t w = 0; w < n_words; ++w) {
    std::uint32_t v = words[w];
    std::uint8_t* c = codes + w * kPer;
    for (int j = 0; j < kPer; ++j) c[j] = static_cast<std::uint8_t>((v >> (B * j)) & kMask);
  }
}

// 3 bits: 8 codes fill exactly 3 bytes, and the word stream is little-endian, so the 96-bit block of 32 codes is
// four independent 24-bit groups; the two codes that straddle words (10 and 21) need no special case.
void pack3(const std::uint8_t* codes, std::size_t n_blocks, std::uint32_t* words) {
  unsigned char* out = reinterpret_cast<unsigned char*>(words);
  for (std::size_t g = 0; g < n_blocks * 4; ++g) {
    const std::uint8_t* c = codes + g * 8;
    std::uint32_t v = 0;
    for (int j = 0; j < 8; ++j) v |= static_cast<std::uint32_t>(c[j]) << (3 * j);
    out[3 * g + 0] = static_cast<unsigned char>(v);
    out[3 * g + 1] = static_cast<unsigned char>(v >> 8);
    out[3 * g + 2] = static_cast<unsigned char>(v >> 16);
  }
}

void unpack3(const std::uint32_t* words, std::size_t n_blocks, std::uint8_t* codes) {
  const unsigned char* in = reinterpret_cast<const unsigned char*>(words);
  for (std::size_t g = 0; g < n_blocks * 4; ++g) {
    const std::uint32_t v = static_cast<std::uint32_t>(in[3 * g]) | (static_cast<std::uint32_t>(in[3 * g + 1]) << 8) |
                            (static_cast<std::uint32_t>(in[3 * g + 2]) << 16);
    std::uint8_t* c = codes + g * 8;
    for (int j = 0; j < 8; ++j) c[j] = static_cast<std::uint8_t>((v >> (3 * j)) & 7u);
  }
}

}  // namespace

Status pack_bits_ref(std::span<const std::uint8_t> codes, int bits, std::span<std::uint32_t> words) {
  EPK_TRY(check_bits(bits));
  EPK_TRY(check_sizes(codes.size(), words.size(), bits, "pack_bits_ref"));
  EPK_TRY(check_codes(codes, bits));
  pack_ref_unchecked(codes.data(), codes.size(), bits, words.data());
  return {};
}

Status unpack_bits_ref(std::span<const std::uint32_t> words, int bits, std::span<std::uint8_t> codes) {
  EPK_TRY(check_bits(bits));
  EPK_TRY(check_sizes(codes.size(), words.size(), bits, "unpack_bits_ref"));
  unpack_ref_unchecked(words.data(), bits, codes.data(), codes.size());
  return {};
}

Status pack_bits(std::span<const std::uint8_t> codes, int bits, std::span<std::uint32_t> words) {
  EPK_TRY(check_bits(bits));
  EPK_TRY(check_sizes(codes.size(), words.size(), bits, "pack_bits"));
  EPK_TRY(check_codes(codes, bits));
  // Codes per block and words per block of the fast path; the tail (a partial block) goes through the reference,
  // which starts on a word boundary because every block ends on one.
  std::size_t per_block = 0, words_per_block = 0;
  switch (bits) {
    case 2: per_block = 16; words_per_block = 1; break;
    case 3: per_block = 32; words_per_block = 3; break;
    case 4: per_block = 8; words_per_block = 1; break;
    case 8: per_block = 4; words_per_block = 1; break;
    default: pack_ref_unchecked(codes.data(), codes.size(), bits, words.data()); return {};
  }
  const std::size_t blocks = codes.size() / per_block;
  switch (bits) {
    case 2: pack_divisor<2>(codes.data(), blocks, words.data()); break;
    case 3: pack3(codes.data(), blocks, words.data()); break;
    case 4: pack_divisor<4>(codes.data(), blocks, words.data()); break;
    case 8: pack_divisor<8>(codes.data(), blocks, words.data()); break;
  }
  const std::size_t done = blocks * per_block;
  pack_ref_unchecked(codes.data() + done, codes.size() - done, bits, words.data() + blocks * words_per_block);
  return {};
}

Status unpack_bits(std::span<const std::uint32_t> words, int bits, std::span<std::uint8_t> codes) {
  EPK_TRY(check_bits(bits));
  EPK_TRY(check_sizes(codes.size(), words.size(), bits, "unpack_bits"));
  std::size_t per_block = 0, words_per_block = 0;
  switch (bits) {
    case 2: per_block = 16; words_per_block = 1; break;
    case 3: per_block = 32; words_per_block = 3; break;
    case 4: per_block = 8; words_per_block = 1; break;
    case 8: per_block = 4; words_per_block = 1; break;
    default: unpack_ref_unchecked(words.data(), bits, codes.data(), codes.size()); return {};
  }
  const std::size_t blocks = codes.size() / per_block;
  switch (bits) {
    case 2: unpack_divisor<2>(words.data(), blocks, codes.data()); break;
    case 3: unpack3(words.data(), blocks, codes.data()); break;
    case 4: unpack_divisor<4>(words.data(), blocks, codes.data()); break;
    case 8: unpack_divisor<8>(words.data(), blocks, codes.data()); break;
  }
  const std::size_t done = blocks * per_block;
  unpack_ref_unchecked(words.data() + blocks * words_per_block, bits, codes.data() + done, codes.size() - done);
  return {};
}

namespace {

Status check_matrix(std::size_t n_codes, std::size_t rows, std::size_t cols, std::size_t n_words, int bits,
                    const char* who) {
  EPK_TRY(check_bits(bits));
  std::uint64_t total = 0, total_words = 0;
  if (!checked_mul(rows, cols, &total) || total != n_codes ||
      !checked_mul(packed_words(rows, bits), cols, &total_words) || total_words != n_words) {
    return make_error(ErrorCode::kInvalidArgument,
                      std::string(who) + ": [" + std::to_string(rows) + ", " + std::to_string(cols) + "] of " +
                          std::to_string(bits) + " bits needs " + std::to_string(rows * cols) + " codes and " +
                          std::to_string(packed_words(rows, bits) * cols) + " words, got " + std::to_string(n_codes) +
                          " and " + std::to_string(n_words));
  }
  return {};
}

}  // namespace

Status pack_rows_ref(std::span<const std::uint8_t> codes, std::size_t rows, std::size_t cols, int bits,
                     std::span<std::uint32_t> words) {
  EPK_TRY(check_matrix(codes.size(), rows, cols, words.size(), bits, "pack_rows_ref"));
  EPK_TRY(check_codes(codes, bits));
  const std::size_t nw = packed_words(rows, bits);
  std::vector<std::uint8_t> column(rows);
  std::vector<std::uint32_t> stream(nw);
  for (std::size_t c = 0; c < cols; ++c) {
    for (std::size_t r = 0; r < rows; ++r) column[r] = codes[r * cols + c];
    EPK_TRY(pack_bits_ref(column, bits, stream));
    for (std::size_t w = 0; w < nw; ++w) words[w * cols + c] = stream[w];
  }
  return {};
}

Status unpack_rows_ref(std::span<const std::uint32_t> words, std::size_t rows, std::size_t cols, int bits,
                       std::span<std::uint8_t> codes) {
  EPK_TRY(check_matrix(codes.size(), rows, cols, words.size(), bits, "unpack_rows_ref"));
  const std::size_t nw = packed_words(rows, bits);
  std::vector<std::uint8_t> column(rows);
  std::vector<std::uint32_t> stream(nw);
  for (std::size_t c = 0; c < cols; ++c) {
    for (std::size_t w = 0; w < nw; ++w) stream[w] = words[w * cols + c];
    EPK_TRY(unpack_bits_ref(stream, bits, column));
    for (std::size_t r = 0; r < rows; ++r) codes[r * cols + c] = column[r];
  }
  return {};
}

Status pack_rows(std::span<const std::uint8_t> codes, std::size_t rows, std::size_t cols, int bits,
                 std::span<std::uint32_t> words) {
  EPK_TRY(check_matrix(codes.size(), rows, cols, words.size(), bits, "pack_rows"));
  EPK_TRY(check_codes(codes, bits));
  std::fill(words.begin(), words.end(), 0u);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t pos = r * static_cast<std::size_t>(bits);
    const unsigned off = static_cast<unsigned>(pos % 32);
    std::uint32_t* lo = words.data() + (pos / 32) * cols;
    const std::uint8_t* src = codes.data() + r * cols;
    for (std::size_t c = 0; c < cols; ++c) lo[c] |= static_cast<std::uint32_t>(src[c]) << off;
    if (off + static_cast<unsigned>(bits) > 32) {
      std::uint32_t* hi = lo + cols;
      for (std::size_t c = 0; c < cols; ++c) hi[c] |= static_cast<std::uint32_t>(src[c]) >> (32 - off);
    }
  }
  return {};
}

Status unpack_rows(std::span<const std::uint32_t> words, std::size_t rows, std::size_t cols, int bits,
                   std::span<std::uint8_t> codes) {
  EPK_TRY(check_matrix(codes.size(), rows, cols, words.size(), bits, "unpack_rows"));
  const std::uint32_t mask = (1u << bits) - 1u;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t pos = r * static_cast<std::size_t>(bits);
    const unsigned off = static_cast<unsigned>(pos % 32);
    const std::uint32_t* lo = words.data() + (pos / 32) * cols;
    std::uint8_t* dst = codes.data() + r * cols;
    if (off + static_cast<unsigned>(bits) > 32) {
      const std::uint32_t* hi = lo + cols;
      for (std::size_t c = 0; c < cols; ++c) {
        dst[c] = static_cast<std::uint8_t>(((lo[c] >> off) | (hi[c] << (32 - off))) & mask);
      }
    } else {
      for (std::size_t c = 0; c < cols; ++c) dst[c] = static_cast<std::uint8_t>((lo[c] >> off) & mask);
    }
  }
  return {};
}

}  // namespace epk::layouts
