// The native profile's metadata (docs/STREAM.md section 9): the same tiles, payload words and tables as the reference
// profile, with lighter metadata around them. Tile word counts in one fixed width, each final state in its own bit
// length, the tables' bounds and frequencies in Elias gamma codes, row scales as fp16 under one power-of-two shift
// per tensor. A native tensor is expanded at open into the arrays every decoder reads (LatticeRansStream), so the CPU
// and GPU decoders and the device tier see one form; docs/measurements/codec-overhead.md has what each part saves.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "codec/rans/encoded_tensor.h"
#include "codec/rans/stream.h"

namespace epk::rans {

// Stored fields of a state: a 4-bit length code L = floor(log2 X) - 15, then the L + 15 bits of X below its leading
// one (X in [2^15, 2^31)).
inline constexpr int kStateLengthBits = 4;
// A scale s is stored as the fp16 bits of s * 2^-scale_shift; the shift puts the largest scale in [2^14, 2^15).
inline constexpr int kScaleTopExponent = 14;

// The four packed buffers and three params of a native tensor (the payload is the reference's).
struct NativeMetadata {
  std::vector<std::uint8_t> word_counts;  // tiles fields of count_bits bits: each tile's payload words
  std::vector<std::uint8_t> states;       // tiles * 32 states, tile by tile, lane by lane
  std::vector<std::uint8_t> tables;       // per table: gamma(alphabet + 1), gamma(zigzag(sym_min) + 1), gamma(f + 1)...
  std::vector<std::uint16_t> scales;      // rows
  std::uint32_t count_bits = 0;           // 0..32
  std::int32_t scale_shift = 0;
  std::uint64_t coset1_vectors = 0;       // the vectors whose coset is 1: n_symbols of tables 2, 4, .., 16
};

// The shift of a tensor's scales: the largest lands in [2^14, 2^15) (0 for no rows).
std::int32_t native_scale_shift(std::span<const float> scales);

// Rounds `scales` in place to the native grid (each the nearest fp16 value times 2^shift, ties to even) and returns
// the shift, which is native_scale_shift of the rounded scales. Refuses, naming the first such row, a scale that is
// not finite and positive or that would fall below fp16's normal range under the shift (about 2^28 below the
// largest): such a tensor keeps the reference profile.
Result<std::int32_t> round_scales_to_native(std::vector<float>& scales);

// Packs t, whose scales are on the native grid for `scale_shift` (round_scales_to_native's result). Errors
// (kInvalidArgument): a scale off that grid, a state outside [2^15, 2^31), buffers that disagree with the geometry.
Result<NativeMetadata> pack_native(const EncodedTensor& t, std::int32_t scale_shift);

// What pack_native(t, native_scale_shift(t.scales)) would store, without packing (t's scales need not be on the
// grid): each packed buffer's bytes and the three params.
struct NativeSizes {
  std::uint64_t word_counts = 0, states = 0, tables = 0, scales = 0;
  std::uint32_t count_bits = 0;
  std::int32_t scale_shift = 0;
  std::uint64_t coset1_vectors = 0;
};
NativeSizes native_sizes(const EncodedTensor& t);

// A stored native tensor's packed buffers (views into the file).
struct NativeView {
  std::span<const std::uint8_t> word_counts;
  std::span<const std::uint8_t> states;
  std::span<const std::uint8_t> tables;
  std::span<const std::uint16_t> scales;
  std::uint32_t count_bits = 0;
  std::int32_t scale_shift = 0;
  std::uint64_t coset1_vectors = 0;
};

// The arrays the decoders read, owned: LatticeRansStream's offsets, states, tables, freq_tables and scales.
struct ExpandedMetadata {
  std::vector<std::uint32_t> offsets;
  std::vector<std::uint32_t> states;
  std::vector<TableMeta> tables;
  std::vector<std::uint16_t> freq_tables;
  std::vector<float> scales;
};

// Expands v for a stream of geometry g (rows, padded_cols, tile_symbols; payload for its length). Errors
// (kBadInput, prefixed with `where`): a buffer too short, too long or with nonzero padding, a field out of range
// (count_bits above 32, a shift that leaves float32's normal range, a scale that is not positive and finite, a
// length code past 15, a table alphabet above 2^15 or bound past 2^28), word counts that do not sum to the payload.
// What validate_stream checks (frequencies summing to 2^prob_bits, the coset tables' counts) is left to it.
Result<ExpandedMetadata> expand_native(const NativeView& v, const LatticeRansStream& g, std::string_view where);

// t's LatticeRansStream view with the expanded arrays in place of its metadata (payload and geometry from g).
LatticeRansStream with_expanded(const LatticeRansStream& g, const ExpandedMetadata& e);

}  // namespace epk::rans
