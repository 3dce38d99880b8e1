// What the host planner (decode_plan.cc) and the kernels (decode_kernel.cuh, decode_lean.cuh) share: the POD records
// laid out in scratch by the plan (one per tensor and one per thread block), the table placements and the kernels'
// block shapes. Both compilers include this header.
#pragma once

#include <cstdint>

namespace epk::cuda::detail {

inline constexpr int kRingChunks = 128;              // 16-byte chunks of staged words per warp (2 KiB)
inline constexpr int kRingWords = kRingChunks * 8;
inline constexpr int kRingBytes = kRingWords * 2;
inline constexpr int kMaxWarpsPerBlock = 32;
// The fewest warps a block the planner gives two-level tables before it takes the global ones (decode_plan.cc): at
// most two rounds of a 32-warp block (1.2-1.35x one round on the lean kernel at 4 bpp), against ~3x for the global
// tables at 8 bpp.
inline constexpr std::uint32_t kMinTwoLevelWarps = 16;
inline constexpr int kLutTables = 16;
// The prob_bits the lean kernel is built for: the encoder's and the reference package's 2 and 4 bpp streams.
inline constexpr int kLeanProbBits = 11;

// A kernel's block shape: compiled for blocks of at most kMaxWarps warps and one block per SM, so ptxas fits each
// thread into 65536 / (32 kMaxWarps) registers. Every kernel has the 32-warp form (64 registers per thread: any plan
// fits); the shared-table kernels also have a 24-warp form (80 registers), which the plan takes where its blocks
// have at most 24 warps: faster on the H200 (docs/measurements/gpu-decode.md).
template <int kMaxWarps_>
struct BlockShape {
  static constexpr int kMaxWarps = kMaxWarps_;
  static constexpr int kThreads = kMaxWarps * 32;
  static_assert(kMaxWarps >= 1 && kMaxWarps <= kMaxWarpsPerBlock);
};
using Block24 = BlockShape<24>;
using Block32 = BlockShape<kMaxWarpsPerBlock>;

// How the field tables are held. Each placement serves streams the others cannot hold (the encoder and the
// reference package pick prob_bits 11 up to 7 bpp, 12 above, raised up to 15 while an alphabet overflows; the
// decoder accepts 9..15):
enum LutMode : int {
  // 32-bit packed entries in shared memory (16 << prob_bits entries): prob_bits <= 11 and every value within
  // 31 - 2 prob_bits signed bits, i.e. the 2 and 4 bpp streams. The fastest; the lean loop needs it.
  kPackedShared = 0,
  // slot -> u16 symbol index, symbol -> (freq << 16 | cdf), in shared memory: prob_bits 12 (8 bpp) and streams of
  // lower prob_bits whose values do not pack, while fewer than 65535 symbols and the region fit.
  kTwoLevelShared = 1,
  // 64-bit entries read through L1: any prob_bits and symbol range (prob_bits 13..15, whose tables no shared
  // region holds, and anything the shared placements refuse).
  kWideGlobal = 2,
};
inline constexpr int kLutModes = 3;
inline constexpr bool lut_in_shared(int mode) { return mode != kWideGlobal; }

struct TensorDesc {
  const std::uint16_t* payload;
  const std::uint32_t* offsets;
  const std::uint32_t* states;
  const float* scales;
  std::uint64_t lut_offset;   // byte offset in scratch of this tensor's kLutTables << prob_bits entries
  void* out;
  float* row_scales;
  std::uint64_t payload_words;
  std::uint64_t vectors;      // rows * vecs_per_row
  std::uint64_t row_magic;    // floor((2^64 - 1) / vecs_per_row) + 1: row = umul64hi(vector, magic) (vpr > 1)
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
  std::uint32_t first_tile;    // first tile that covers row_begin
  float int8_gain;             // the rowwise formats' gain (int8: limit 127, fp8 e4m3: 448; rans::rowwise_gain)
  float int8_half_over_gain;
  std::uint32_t lut_bytes;    // size of this tensor's table region in scratch (copied to shared memory)
  std::uint32_t total_symbols;  // kTwoLevelShared: symbols over tables 1..16
  std::uint32_t clamp_bf16;     // 1: clamp bf16 outputs to the finite range (as the CPU decoder does)
  std::uint32_t pad[3];
};
inline constexpr int kDescWords = 40;
static_assert(sizeof(TensorDesc) == kDescWords * 4);

struct WorkItem {
  std::uint32_t tensor;
  std::uint32_t tile_begin;
  std::uint32_t tile_end;
  std::uint32_t pad;  // 0
};
static_assert(sizeof(WorkItem) == 16);

// Packed 32-bit entry for slot s of a field table (kPackedShared): bits [0, pb) slot - cdf(sym); [pb, 31 - pb) the
// decoded value (sym_min + sym) as a signed (31 - 2pb)-bit integer; [31 - pb, 32) freq(sym) (1..2^pb). Decode step:
// x = (e >> (31 - pb)) * (x >> pb) + (e & (2^pb - 1)); value = (int)(e << (pb + 1)) >> (2pb + 1).
inline constexpr bool packed_value_fits(std::int64_t value, std::uint32_t prob_bits) {
  const int bits = 31 - 2 * static_cast<int>(prob_bits);
  if (bits <= 0) return false;
  const std::int64_t lo = -(std::int64_t{1} << (bits - 1));
  const std::int64_t hi = (std::int64_t{1} << (bits - 1)) - 1;
  return value >= lo && value <= hi;
}

// Wide 64-bit entry (kWideGlobal): low word freq << 16 | (slot - cdf); high word the value (int32).
// Two-level region (kTwoLevelShared): u16 g[16 << pb] (index over all tables' symbols), u32 (freq << 16 | cdf)[total
// + 1] (the last one a dummy for empty tables), i32 value_offset[16] (value = g + value_offset[table - 1]).

}  // namespace epk::cuda::detail
