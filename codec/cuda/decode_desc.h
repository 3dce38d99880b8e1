// POD records shared by the host planner (decode_plan.cc) and the kernel (decode_kernel.cuh): one per tensor and one
// per thread block, laid out in scratch by the plan. Both compilers include this header.
#pragma once

#include <cstdint>

namespace epk::cuda::detail {

inline constexpr int kRingChunks = 128;              // 16-byte chunks of staged words per warp (2 KiB)
inline constexpr int kRingWords = kRingChunks * 8;
inline constexpr int kRingBytes = kRingWords * 2;
inline constexpr int kMaxWarpsPerBlock = 32;
inline constexpr int kFastRegsMaxWarps = 24;         // the kFast == 2 kernels (80 registers per thread)
inline constexpr int kLutTables = 16;
// Warp-specialised kernel (decode_ws.cuh): a slot holds one group's entries 0..3 of each lane (uint4 per lane),
// entries 4..7, the coset per lane (u32), then {tile, group start, valid lanes, 0}; two slots and four 8-byte
// mbarriers (full and empty per slot) per decode warp; a reconstruction warp serves at most kWsMaxServed decode warps.
inline constexpr std::uint32_t kWsSlotBytes = 32 * 16 * 2 + 32 * 4 + 16;
inline constexpr std::uint32_t kWsBytesPerDecodeWarp = 2 * kWsSlotBytes + 4 * 8;
inline constexpr std::uint32_t kWsEndOfWork = 0xffffffffu;  // tile field of the slot after a warp's last group
inline constexpr int kWsMaxServed = 3;                // tables 1..16; the coset (table 0) decodes arithmetically

// How the field tables are held (one kernel variant each).
enum LutMode : int {
  kPackedShared = 0,  // 32-bit entries staged in shared memory
  kPackedGlobal = 1,  // 32-bit entries read through L1
  kWideGlobal = 2,    // 64-bit entries read through L1: any prob_bits and symbol range
  kTwoLevelShared = 3,  // slot -> u16 symbol index, symbol -> (freq << 16 | cdf), in shared memory (prob_bits 12..)
};

inline constexpr bool lut_in_shared(int mode) { return mode == kPackedShared || mode == kTwoLevelShared; }

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
  std::uint32_t pad;
};
static_assert(sizeof(WorkItem) == 16);

// Packed 32-bit entry for slot s of a field table (kPacked*): bits [0, pb) slot - cdf(sym); [pb, 31 - pb) the decoded
// value (sym_min + sym) as a signed (31 - 2pb)-bit integer; [31 - pb, 32) freq(sym) (1..2^pb). Decode step:
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
