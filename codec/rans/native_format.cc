#include "codec/rans/native_format.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>

#include "codec/common/float_convert.h"
#include "codec/rans/bit_stream.h"

namespace epk::rans {

namespace {

constexpr float kF16MinNormal = 6.103515625e-05f;  // 2^-14
constexpr int kGammaAlphabetBits = 17;             // alphabet + 1 <= 2^15 + 1
constexpr int kGammaBoundBits = 31;                // zigzag(sym_min) + 1 <= 2^29 + 1
constexpr int kGammaFreqBits = 17;                 // freq + 1 <= 2^15 + 1

std::uint64_t zigzag(std::int64_t v) { return v >= 0 ? std::uint64_t(2 * v) : std::uint64_t(-2 * v - 1); }
std::int64_t unzigzag(std::uint64_t z) { return (z & 1u) ? -std::int64_t(z >> 1) - 1 : std::int64_t(z >> 1); }

// The scale a stored fp16 value stands for under `shift`.
float native_scale(std::uint16_t h, std::int32_t shift) { return std::ldexp(float_from_f16(h), shift); }

Error bad(std::string_view where, const std::string& what) {
  return make_error(ErrorCode::kBadInput, std::string(where) + ": " + what);
}

}  // namespace

std::int32_t native_scale_shift(std::span<const float> scales) {
  if (scales.empty()) return 0;
  return std::ilogb(*std::max_element(scales.begin(), scales.end())) - kScaleTopExponent;
}

Result<std::int32_t> round_scales_to_native(std::vector<float>& scales) {
  for (std::size_t r = 0; r < scales.size(); ++r) {
    if (!std::isfinite(scales[r]) || !(scales[r] > 0.0f)) {
      return make_error(ErrorCode::kInvalidArgument, "row " + std::to_string(r) + ": scale " +
                                                         std::to_string(scales[r]) + " is not finite and positive");
    }
  }
  // The largest may round up to the next power of two, which moves the shift by one: round again under it (values
  // already on the grid stay), so that native_scale_shift of the rounded scales is the shift they are on.
  std::int32_t shift = native_scale_shift(scales);
  for (int pass = 0; pass < 2; ++pass) {
    const float top = std::ldexp(1.0f, shift + kScaleTopExponent);
    for (std::size_t r = 0; r < scales.size(); ++r) {
      const float y = std::ldexp(scales[r], -shift);
      if (y < kF16MinNormal) {
        return make_error(ErrorCode::kInvalidArgument,
                          "row " + std::to_string(r) + ": scale " + std::to_string(scales[r]) +
                              " is more than 2^28 below the largest (about " + std::to_string(top) +
                              "): below fp16's normal range under the tensor's shift");
      }
      scales[r] = native_scale(f16_from_float(y), shift);
    }
    const std::int32_t after = native_scale_shift(scales);
    if (after == shift) break;
    shift = after;
  }
  return shift;
}

namespace {

// The three bit streams of section 9, into any sink with BitWriter's interface (BitWriter to pack, BitCounter to
// size): one traversal for both, so a size is what packing writes. States must be in [2^15, 2^31) (pack_native
// checks; a stray lower one is sized as 2^15).
std::uint32_t widest_count(const EncodedTensor& t) {
  std::uint32_t widest = 0;
  for (std::size_t i = 0; i + 1 < t.offsets.size(); ++i) widest = std::max(widest, t.offsets[i + 1] - t.offsets[i]);
  return widest;
}
template <class Sink>
void emit_word_counts(const EncodedTensor& t, std::uint32_t count_bits, Sink& out) {
  for (std::size_t i = 0; i + 1 < t.offsets.size(); ++i) out.bits(t.offsets[i + 1] - t.offsets[i], int(count_bits));
}
template <class Sink>
void emit_states(const EncodedTensor& t, Sink& out) {
  for (std::uint32_t x : t.states) {
    const int length = std::bit_width(x | kStateLow) - 1;  // 15..30
    out.bits(std::uint32_t(length - 15), kStateLengthBits);
    out.bits(x, length);
  }
}
template <class Sink>
void emit_tables(const EncodedTensor& t, Sink& out) {
  for (const TableMeta& meta : t.tables) {
    out.gamma(std::uint64_t(meta.alphabet) + 1);
    if (meta.alphabet <= 0) continue;
    out.gamma(zigzag(meta.sym_min) + 1);
    for (std::int32_t i = 0; i < meta.alphabet; ++i) {
      out.gamma(std::uint64_t(t.freq_tables[std::size_t(meta.freq_offset + i)]) + 1);
    }
  }
}
// All three streams; returns the word counts' field width (count_bits).
template <class Sink>
std::uint32_t emit_metadata(const EncodedTensor& t, Sink& counts, Sink& states, Sink& tables) {
  const auto count_bits = std::uint32_t(std::bit_width(widest_count(t)));
  emit_word_counts(t, count_bits, counts);
  emit_states(t, states);
  emit_tables(t, tables);
  return count_bits;
}
std::uint64_t coset1_vectors(const EncodedTensor& t) {
  return t.tables.size() > 2 ? std::uint64_t(std::max(t.tables[2].n_symbols, 0)) : 0;
}

}  // namespace

Result<NativeMetadata> pack_native(const EncodedTensor& t, std::int32_t scale_shift) {
  const LatticeRansStream g = t.view();
  const std::uint64_t tiles = tiles_for_vectors(g.vectors(), t.tile_symbols);
  if (t.offsets.size() != tiles + 1 || t.states.size() != tiles * kLanes || t.tables.size() != std::size_t(kTables) ||
      t.scales.size() != t.rows) {
    return make_error(ErrorCode::kInvalidArgument, "pack_native: buffers disagree with the geometry (" +
                                                       std::to_string(tiles) + " tiles, " + std::to_string(t.rows) +
                                                       " rows)");
  }
  for (std::uint32_t x : t.states) {
    if (x < kStateLow || x >= (1u << 31)) {
      return make_error(ErrorCode::kInvalidArgument, "pack_native: state " + std::to_string(x) +
                                                         " outside [2^15, 2^31)");
    }
  }
  NativeMetadata m;
  m.scale_shift = scale_shift;
  m.coset1_vectors = coset1_vectors(t);
  m.scales.resize(t.scales.size());
  for (std::size_t r = 0; r < t.scales.size(); ++r) {
    m.scales[r] = f16_from_float(std::ldexp(t.scales[r], -scale_shift));
    if (native_scale(m.scales[r], scale_shift) != t.scales[r]) {
      return make_error(ErrorCode::kInvalidArgument, "pack_native: row " + std::to_string(r) + "'s scale " +
                                                         std::to_string(t.scales[r]) +
                                                         " is not on the native grid (round_scales_to_native first)");
    }
  }
  BitWriter counts, states, tables;
  m.count_bits = emit_metadata(t, counts, states, tables);
  m.word_counts = counts.take();
  m.states = states.take();
  m.tables = tables.take();
  return m;
}

NativeSizes native_sizes(const EncodedTensor& t) {
  NativeSizes z;
  BitCounter counts, states, tables;
  z.count_bits = emit_metadata(t, counts, states, tables);
  z.word_counts = counts.byte_count();
  z.states = states.byte_count();
  z.tables = tables.byte_count();
  z.scales = 2 * std::uint64_t(t.scales.size());
  z.scale_shift = native_scale_shift(t.scales);
  z.coset1_vectors = coset1_vectors(t);
  return z;
}

Result<ExpandedMetadata> expand_native(const NativeView& v, const LatticeRansStream& g, std::string_view where) {
  const std::uint64_t vectors = g.vectors();
  const std::uint64_t tiles = tiles_for_vectors(vectors, g.tile_symbols);
  if (vectors > std::uint64_t(std::numeric_limits<std::int32_t>::max())) {
    return bad(where, std::to_string(vectors) + " vectors: more than a table's symbol count can hold (2^31 - 1)");
  }
  if (v.count_bits > 32) return bad(where, "count_bits " + std::to_string(v.count_bits) + " above 32");
  if (v.coset1_vectors > vectors) {
    return bad(where, "coset1_vectors " + std::to_string(v.coset1_vectors) + " above the tensor's " +
                          std::to_string(vectors) + " vectors");
  }
  ExpandedMetadata e;

  // Word counts: exactly the bytes tiles * count_bits bits need.
  if (std::uint64_t(v.word_counts.size()) != (tiles * v.count_bits + 7) / 8) {
    return bad(where, "word_counts holds " + std::to_string(v.word_counts.size()) + " bytes, " +
                          std::to_string((tiles * v.count_bits + 7) / 8) + " expected (" + std::to_string(tiles) +
                          " tiles of " + std::to_string(v.count_bits) + " bits)");
  }
  BitReader counts(v.word_counts);
  e.offsets.resize(tiles + 1);
  std::uint64_t at = 0;
  for (std::uint64_t i = 0; i < tiles; ++i) {
    std::uint32_t n = 0;
    counts.bits(int(v.count_bits), n);  // sized above: every read fits
    at += n;
    if (at > g.payload.size()) {
      return bad(where, "word_counts: tile " + std::to_string(i) + " ends at word " + std::to_string(at) +
                            ", past the payload's " + std::to_string(g.payload.size()));
    }
    e.offsets[i + 1] = std::uint32_t(at);
  }
  if (at != g.payload.size()) {
    return bad(where, "word_counts sum to " + std::to_string(at) + " words, the payload holds " +
                          std::to_string(g.payload.size()));
  }
  if (!counts.only_zero_padding()) return bad(where, "word_counts: nonzero padding bits");

  BitReader states(v.states);
  e.states.resize(tiles * kLanes);
  for (std::size_t i = 0; i < e.states.size(); ++i) {
    std::uint32_t code = 0, low = 0;
    if (!states.bits(kStateLengthBits, code) || !states.bits(int(code) + 15, low)) {
      return bad(where, "states: truncated at state " + std::to_string(i) + " of " + std::to_string(e.states.size()));
    }
    e.states[i] = (1u << (code + 15)) | low;
  }
  if (!states.only_zero_padding()) return bad(where, "states: bytes or nonzero bits past the last state");

  BitReader tables(v.tables);
  e.tables.resize(kTables);
  for (int t = 0; t < kTables; ++t) {
    TableMeta& meta = e.tables[std::size_t(t)];
    std::uint64_t n = 0;
    if (!tables.gamma(kGammaAlphabetBits, n) || n - 1 > (1u << 15)) {
      return bad(where, "tables: table " + std::to_string(t) + "'s alphabet is truncated or above 2^15");
    }
    meta.alphabet = std::int32_t(n - 1);
    meta.freq_offset = std::int32_t(e.freq_tables.size());
    meta.n_symbols = t == 0 ? std::int32_t(vectors)
                            : std::int32_t(t % 2 == 0 ? v.coset1_vectors : vectors - v.coset1_vectors);
    if (meta.alphabet == 0) {
      meta.n_symbols = 0;  // validate_stream holds the coset counts to the empty tables
      continue;
    }
    if (!tables.gamma(kGammaBoundBits, n) || unzigzag(n - 1) < -kMaxSymbolMagnitude ||
        unzigzag(n - 1) + meta.alphabet - 1 > kMaxSymbolMagnitude) {
      return bad(where, "tables: table " + std::to_string(t) + "'s smallest value is truncated or past 2^28");
    }
    meta.sym_min = std::int32_t(unzigzag(n - 1));
    for (std::int32_t i = 0; i < meta.alphabet; ++i) {
      if (!tables.gamma(kGammaFreqBits, n) || n - 1 > 0xffffu) {
        return bad(where, "tables: table " + std::to_string(t) + "'s frequency " + std::to_string(i) +
                              " is truncated or above 65535");
      }
      e.freq_tables.push_back(std::uint16_t(n - 1));
    }
  }
  if (!tables.only_zero_padding()) return bad(where, "tables: bytes or nonzero bits past the last table");

  if (v.scales.size() != g.rows) {
    return bad(where, "scales holds " + std::to_string(v.scales.size()) + " values for " + std::to_string(g.rows) +
                          " rows");
  }
  e.scales.resize(g.rows);
  for (std::size_t r = 0; r < e.scales.size(); ++r) {
    e.scales[r] = native_scale(v.scales[r], v.scale_shift);
    if (!std::isfinite(e.scales[r]) || !(e.scales[r] >= FLT_MIN)) {
      return bad(where, "scales: row " + std::to_string(r) + " gives " + std::to_string(e.scales[r]) +
                            " (fp16 bits " + std::to_string(v.scales[r]) + ", shift " + std::to_string(v.scale_shift) +
                            "): not a positive normal float");
    }
  }
  return e;
}

LatticeRansStream with_expanded(const LatticeRansStream& g, const ExpandedMetadata& e) {
  LatticeRansStream s = g;
  s.offsets = e.offsets;
  s.states = e.states;
  s.tables = e.tables;
  s.freq_tables = e.freq_tables;
  s.scales = e.scales;
  return s;
}

}  // namespace epk::rans
