// The input framing of the rANS tile decoder target (rans_tile_fuzz.cc) and its seeds (make_corpus.cc): a lattice-rans
// stream's geometry and buffers, little-endian, without the container around it, so mutations land in the tiles,
// states and tables rather than in JSON:
//   u32 rows, u32 cols, u32 prob_bits, u32 tile_symbols, u32 tiles, u32 freq_count, u32 payload_words,
//   stream_meta i32[17][4], freq_tables u16[freq_count], scales f32[rows], offsets u32[tiles + 1],
//   states u32[tiles * 32], payload u16[payload_words]
// padded_cols is always cols rounded up to 8 (validate_stream's rule, not the decoder's input).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "codec/rans/encoded_tensor.h"

namespace epk::fuzz {

inline void frame_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(std::uint8_t(v >> (8 * i)));
}

template <class T, class A>
void frame_array(std::vector<std::uint8_t>& out, const std::vector<T, A>& v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

inline std::vector<std::uint8_t> frame_stream(const rans::EncodedTensor& t) {
  std::vector<std::uint8_t> out;
  for (std::uint32_t v : {t.rows, t.cols, t.prob_bits, t.tile_symbols, std::uint32_t(t.offsets.size() - 1),
                          std::uint32_t(t.freq_tables.size()), std::uint32_t(t.payload.size())})
    frame_u32(out, v);
  frame_array(out, t.tables);
  frame_array(out, t.freq_tables);
  frame_array(out, t.scales);
  frame_array(out, t.offsets);
  frame_array(out, t.states);
  frame_array(out, t.payload);
  return out;
}

// nullopt when the framing does not hold (sizes past the input): not an input the decoder sees.
inline std::optional<rans::EncodedTensor> unframe_stream(const std::uint8_t* data, std::size_t size) {
  std::size_t pos = 0;
  auto u32 = [&](std::uint32_t* v) {
    if (size - pos < 4) return false;
    std::memcpy(v, data + pos, 4);
    pos += 4;
    return true;
  };
  auto array = [&](auto& v, std::uint64_t n) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    if (n > (size - pos) / sizeof(T)) return false;
    v.resize(n);
    if (n > 0) std::memcpy(v.data(), data + pos, n * sizeof(T));
    pos += n * sizeof(T);
    return true;
  };
  rans::EncodedTensor t;
  std::uint32_t tiles = 0, freq_count = 0, words = 0;
  if (!u32(&t.rows) || !u32(&t.cols) || !u32(&t.prob_bits) || !u32(&t.tile_symbols) || !u32(&tiles) ||
      !u32(&freq_count) || !u32(&words))
    return std::nullopt;
  t.padded_cols = std::uint32_t((std::uint64_t(t.cols) + 7) / 8 * 8);
  if (!array(t.tables, rans::kTables) || !array(t.freq_tables, freq_count) || !array(t.scales, t.rows) ||
      !array(t.offsets, std::uint64_t(tiles) + 1) || !array(t.states, std::uint64_t(tiles) * rans::kLanes) ||
      !array(t.payload, words))
    return std::nullopt;
  return t;
}

}  // namespace epk::fuzz
