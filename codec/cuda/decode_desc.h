// POD records shared by the host planner (decode_plan.cc) and the kernel (decode_kernel.cuh): one per tensor and one
// per thread block, laid out in scratch by the plan. Both compilers include this header.
#pragma once

#include <cstdint>

namespace epk::cuda::detail {

inline constexpr int kRingChunks = 128;              // 16-byte chunks of staged words per warp (2 KiB)
inline constexpr int kRingWords = kRingChunks * 8;
inline constexpr int kMaxWarpsPerBlock = 32;
inline constexpr int kLutTables = 16;                // tables 1..16; the coset (table 0) decodes arithmetically

struct TensorDesc {
  const std::uint16_t* payload;
  const std::uint32_t* offsets;
  const std::uint32_t* states;
  const float* scales;
  std::uint64_t lut_offset;   // byte offset in scratch of kLutTables << prob_bits packed entries
  void* out;
  float* row_scales;
  std::uint64_t payload_words;
  std::uint64_t vectors;      // rows * vecs_per_row
  std::uint32_t rows;
  std::uint32_t cols;
  std::uint32_t vecs_per_row;  // padded_cols / 8
  std::uint32_t tile_vectors;
  std::uint32_t tiles;
  std::uint32_t prob_bits;
  std::uint32_t coset_f0;      // frequency of coset 0 (0..M)
  std::uint32_t format;        // OutputFormat
  std::uint32_t row_begin;
  std::uint32_t row_end;
  std::uint32_t tile_base;     // index of this tensor's first tile in the per-tile status array
  float int8_gain;
  float int8_half_over_gain;
  std::uint32_t first_tile;    // first tile that covers row_begin
};
static_assert(sizeof(TensorDesc) == 128);

struct WorkItem {
  std::uint32_t tensor;
  std::uint32_t tile_begin;
  std::uint32_t tile_end;
  std::uint32_t pad;
};
static_assert(sizeof(WorkItem) == 16);

// Packed lookup entry for slot s of a field table: bits [0, pb) slot - cdf(sym), [pb, 2pb) freq(sym) - 1,
// [2pb, 32) the decoded value (sym_min + sym) as a signed (32 - 2pb)-bit integer. Decode step:
// q = x >> pb; x = (freq - 1) * q + q + delta.
inline constexpr bool lut_value_fits(std::int64_t value, std::uint32_t prob_bits) {
  const int bits = 32 - 2 * static_cast<int>(prob_bits);
  if (bits <= 0) return false;
  const std::int64_t lo = -(std::int64_t{1} << (bits - 1));
  const std::int64_t hi = (std::int64_t{1} << (bits - 1)) - 1;
  return value >= lo && value <= hi;
}

}  // namespace epk::cuda::detail
