// The fused lattice-rans decode kernel's building blocks and its general group loop. One warp decodes one tile at a
// time: 32 interleaved rANS states (lane i owns vectors i, i+32, ... of the tile), 9 symbols per vector (the coset,
// then z1..z7 and m under that coset's tables), then the E8 inverse, the row scale and the output conversion, stored
// as one 16-byte (or 8/32-byte) write per lane. Two loops use them: the lean loop (decode_lean.cuh: packed shared
// tables at prob_bits 11, the 2 and 4 bpp streams) and the general loop here (everything else, 8 bpp included).
//
// Why it looks like this (docs/decisions/gpu-decoder.md; figures in docs/measurements/gpu-decode.md):
// - Each renormalisation reads at most one 16-bit word; a ballot and a popcount of the lower lanes give every lane
//   its word without a prefix-sum pass (lanes wrote in ascending order, the decoder walks backwards).
// - The state chain (lookup -> multiply-add -> compare -> ballot -> word) is the critical path, so the words come from
//   shared memory: each warp stages its tile's words in a 2 KiB ring with cp.async, two groups (64 vectors) ahead,
//   so a state update never waits on a global load.
// - The 16 field tables are packed into one 32-bit entry per slot (delta, signed value, frequency on top so the
//   update is one shift and one multiply-add after the load); with prob_bits <= 11 they sit in shared memory
//   (128 KiB per block). Where values do not pack (8 bpp) a two-level table (u16 symbol index per slot) still fits in
//   shared memory; only what neither holds reads 64-bit entries through L1 (decode_desc.h, LutMode). The coset table
//   has two symbols and is decoded arithmetically from the frequency of coset 0.
// - Full groups are a separate instantiation from the one partial group (count % 32 vectors) at the tile's end, which
//   is decoded first as the encoder emitted it last; full groups carry no per-lane validity predicate.
// - Row, column and scale of the next group are fetched while the current group decodes (software pipelined).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "codec/cuda/decode/decode.h"
#include "codec/cuda/decode/decode_desc.h"

namespace epk::cuda::detail {

constexpr std::uint32_t kFull = 0xffffffffu;
constexpr std::uint32_t kStateLow = 1u << 15;

__device__ __forceinline__ std::uint32_t lanemask_ge() {
  std::uint32_t m;
  asm("mov.u32 %0, %%lanemask_ge;" : "=r"(m));
  return m;
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ std::uint32_t bf16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return static_cast<std::uint32_t>(__bfloat16_as_ushort(b));
}
__device__ __forceinline__ std::uint32_t fp16_bits(float v) {
  return static_cast<std::uint32_t>(__half_as_ushort(__float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f))));
}
__device__ __forceinline__ std::uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&b);
}

// Eight floats to bf16 (round to nearest even; paired conversions, one F2FP per two values) in one 16-byte store at
// element `elem` of `out` (a multiple of 8).
__device__ __forceinline__ void store_bf16x8(void* out, std::uint64_t elem, const float* v) {
  uint4 w;
  w.x = bf16x2_bits(v[0], v[1]);
  w.y = bf16x2_bits(v[2], v[3]);
  w.z = bf16x2_bits(v[4], v[5]);
  w.w = bf16x2_bits(v[6], v[7]);
  reinterpret_cast<uint4*>(out)[elem / 8] = w;
}
__device__ __forceinline__ std::uint32_t fp16x2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(fminf(fmaxf(lo, -65504.0f), 65504.0f), fminf(fmaxf(hi, -65504.0f), 65504.0f));
  return *reinterpret_cast<const std::uint32_t*>(&h);
}
__device__ __forceinline__ std::uint32_t e4m3_bits(float v) {
  return static_cast<std::uint32_t>(__nv_cvt_float_to_fp8(fminf(fmaxf(v, -448.0f), 448.0f), __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ std::uint32_t e5m2_bits(float v) {
  return static_cast<std::uint32_t>(
      __nv_cvt_float_to_fp8(fminf(fmaxf(v, -57344.0f), 57344.0f), __NV_SATFINITE, __NV_E5M2));
}
__device__ __forceinline__ std::uint32_t int8_bits(int q2, float gain, bool exact) {
  int q = q2;
  if (!exact) {
    q = static_cast<int>(rintf(__fmul_rn(static_cast<float>(q2), gain)));
    q = max(-127, min(127, q));
  }
  return static_cast<std::uint32_t>(q) & 0xffu;
}

// Writes one decoded vector (8 coordinates z, coset c) at element offset `elem` of the output: n elements (fewer than
// 8 only at the end of a row whose length is not a multiple of 8), with wide stores when every row is vector-aligned.
__device__ __forceinline__ void store_vector(const TensorDesc& d, std::uint64_t elem, int n, bool wide, const int* z,
                                             int c, float scale) {
  const float chalf = c ? 0.5f : 0.0f;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fadd_rn(static_cast<float>(z[j]), chalf), scale);
  const auto format = static_cast<OutputFormat>(d.format);
  if (format == OutputFormat::kBf16 && d.clamp_bf16) {  // uniform; only for scales that can reach the bf16 limit
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = fminf(fmaxf(v[j], -3.38953139e38f), 3.38953139e38f);
  }
  if (wide) {
    switch (format) {
      case OutputFormat::kBf16:
        store_bf16x8(d.out, elem, v);
        return;
      case OutputFormat::kFp16: {
        uint4 w;
        w.x = fp16x2_bits(v[0], v[1]);
        w.y = fp16x2_bits(v[2], v[3]);
        w.z = fp16x2_bits(v[4], v[5]);
        w.w = fp16x2_bits(v[6], v[7]);
        reinterpret_cast<uint4*>(d.out)[elem / 8] = w;
        return;
      }
      case OutputFormat::kFp32: {
        float4* o = reinterpret_cast<float4*>(d.out) + elem / 4;
        o[0] = make_float4(v[0], v[1], v[2], v[3]);
        o[1] = make_float4(v[4], v[5], v[6], v[7]);
        return;
      }
      case OutputFormat::kFp8E4M3:
      case OutputFormat::kFp8E5M2: {
        std::uint32_t b[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) b[j] = format == OutputFormat::kFp8E4M3 ? e4m3_bits(v[j]) : e5m2_bits(v[j]);
        reinterpret_cast<uint2*>(d.out)[elem / 8] =
            make_uint2(b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24),
                       b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24));
        return;
      }
      case OutputFormat::kInt8Rowwise: {
        const bool exact = d.int8_gain == 1.0f;
        std::uint32_t b[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) b[j] = int8_bits(2 * z[j] + c, d.int8_gain, exact);
        reinterpret_cast<uint2*>(d.out)[elem / 8] =
            make_uint2(b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24),
                       b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24));
        return;
      }
      case OutputFormat::kFp8E4M3Rowwise: {
        std::uint32_t b[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) b[j] = e4m3_bits(__fmul_rn(static_cast<float>(2 * z[j] + c), d.int8_gain));
        reinterpret_cast<uint2*>(d.out)[elem / 8] =
            make_uint2(b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24),
                       b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24));
        return;
      }
    }
    return;
  }
  for (int j = 0; j < n; ++j) {
    const std::uint64_t e = elem + j;
    switch (format) {
      case OutputFormat::kBf16: static_cast<std::uint16_t*>(d.out)[e] = bf16_bits(v[j]); break;
      case OutputFormat::kFp16: static_cast<std::uint16_t*>(d.out)[e] = fp16_bits(v[j]); break;
      case OutputFormat::kFp32: static_cast<float*>(d.out)[e] = v[j]; break;
      case OutputFormat::kFp8E4M3: static_cast<std::uint8_t*>(d.out)[e] = e4m3_bits(v[j]); break;
      case OutputFormat::kFp8E5M2: static_cast<std::uint8_t*>(d.out)[e] = e5m2_bits(v[j]); break;
      case OutputFormat::kInt8Rowwise:
        static_cast<std::uint8_t*>(d.out)[e] = int8_bits(2 * z[j] + c, d.int8_gain, d.int8_gain == 1.0f);
        break;
      case OutputFormat::kFp8E4M3Rowwise:
        static_cast<std::uint8_t*>(d.out)[e] = e4m3_bits(__fmul_rn(static_cast<float>(2 * z[j] + c), d.int8_gain));
        break;
    }
  }
}

__device__ __forceinline__ void cp_async16_s(std::uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem));
}
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
__device__ __forceinline__ std::uint32_t ld_shared_u16(std::uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
  return v;
}
// Hides a value from the optimizer so it stays one register: the table base is then added to the slot with one LEA
// on the state chain instead of being re-associated into an IADD3 + LEA there.
__device__ __forceinline__ std::uint32_t opaque(std::uint32_t v) {
  std::uint32_t r;
  asm("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}
__device__ __forceinline__ float ld_global_nc_f32(const float* p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ std::uint32_t ld_shared_u32(std::uint32_t addr) {
  std::uint32_t v;
  asm("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

// Where a lane's vector of a group goes: row, column, whether it is stored (row range, columns, partial group) and
// its row scale (loaded for every lane: a non-stored lane reads row_begin's). Shared by every group loop.
struct Placement {
  std::uint32_t row, col;
  bool store;
  float scale;
};
__device__ __forceinline__ Placement finish_placement(const TensorDesc& d, std::uint32_t row, std::uint32_t col,
                                                      bool lane_valid) {
  Placement pl;
  pl.row = row;
  pl.col = col;
  pl.store = lane_valid && row >= d.row_begin && row < d.row_end && col < d.cols;
  pl.scale = ld_global_nc_f32(d.scales + (pl.store ? row : d.row_begin));
  return pl;
}
// Vector index -> row and column without a previous group (a multiply-high for the row, no division).
__device__ __forceinline__ void vector_row_col(const TensorDesc& d, std::uint64_t vec, std::uint32_t& row,
                                               std::uint32_t& col) {
  row = d.vecs_per_row == 1 ? static_cast<std::uint32_t>(vec)
                            : static_cast<std::uint32_t>(__umul64hi(vec, d.row_magic));
  col = static_cast<std::uint32_t>(vec - static_cast<std::uint64_t>(row) * d.vecs_per_row) * 8;
}
// The placement of each group in decode order: stepped from the previous group where rows have at least 32 vectors
// (this group's vectors are the previous group's minus 32, so a row is crossed at most once), else computed.
// start/step: the branch-free form the lean loop's bf16 store takes (the plan gives it rows of >= 32 vectors only).
struct GroupPlacer {
  std::uint32_t prev_row = 0, prev_col = 0;
  bool have_prev = false;
  __device__ __forceinline__ Placement start(const TensorDesc& d, std::uint64_t vec, bool lane_valid) {
    vector_row_col(d, vec, prev_row, prev_col);
    have_prev = true;
    return finish_placement(d, prev_row, prev_col, lane_valid);
  }
  __device__ __forceinline__ Placement step(const TensorDesc& d, bool lane_valid) {
    const int c = static_cast<int>(prev_col) - 256;
    prev_row = c < 0 ? prev_row - 1 : prev_row;
    prev_col = static_cast<std::uint32_t>(c < 0 ? c + static_cast<int>(d.vecs_per_row * 8) : c);
    return finish_placement(d, prev_row, prev_col, lane_valid);
  }
  __device__ __forceinline__ Placement next(const TensorDesc& d, bool step_rows, std::uint64_t v0,
                                            std::uint32_t group_start, bool lane_valid) {
    if (step_rows && have_prev) return step(d, lane_valid);
    return start(d, v0 + group_start + (threadIdx.x & 31), lane_valid);
  }
};

// End of a tile: the word position must be back at the tile's first word and every state at 2^15 (warp-wide).
__device__ __forceinline__ rans::TileFault tile_end_fault(std::uint32_t p2, std::uint32_t x, std::uint32_t wb,
                                                          std::uint32_t we) {
  const std::uint32_t p = p2 >> 1;
  const bool states_ok = __all_sync(kFull, x == kStateLow);
  if (p > we) return rans::TileFault::kTruncated;  // p wrapped below zero: a word before the tile start was needed
  if (p != wb) return p > wb ? rans::TileFault::kUnreadWords : rans::TileFault::kTruncated;
  if (!states_ok) return rans::TileFault::kBadFinalState;
  return rans::TileFault::kOk;
}
// Lane 0 writes the tile's status and, for a corrupt tile, counts it and keeps the lowest (tensor, tile).
__device__ __forceinline__ void record_tile(const TensorDesc& d, std::uint32_t tensor, std::uint32_t tile,
                                            rans::TileFault fault, DecodeStatus* status, std::uint8_t* tile_status) {
  if ((threadIdx.x & 31) == 0) {
    tile_status[d.tile_base + (tile - d.first_tile)] = static_cast<std::uint8_t>(fault);
    if (fault != rans::TileFault::kOk) {
      atomicAdd(&status->bad_tiles, 1u);
      atomicMax(reinterpret_cast<unsigned long long*>(&status->first_bad_inverted),
                ~((static_cast<unsigned long long>(tensor) << 32) | tile));
    }
  }
}

// The block's shared-memory layout and its prologue, shared by the kernels: [tables][pad to 2 KiB][ring_warps word
// rings of 2 KiB][descriptor][tile counter]. Copies the descriptor and (with_luts) the tables and sets the counter to
// the first tile after the `static_tiles` the caller hands out itself; the caller then joins the block's barrier.
// The tables (up to 128 KiB, the same for every block) go by cp.async, all in flight at once: a copy loop through
// registers waited one L2 round trip per 16 bytes per thread (docs/measurements/gpu-decode.md). defer_lut_wait: the
// caller waits (cp.async.wait_all) before its __syncthreads(), after it has started its first tile, so that tile's
// loads overlap the copy.
struct BlockSetup {
  std::uint32_t smem0;   // shared address of the dynamic shared memory
  std::uint32_t ring0;   // first word ring
  std::uint32_t* desc_words;
  std::uint32_t* next_tile;
  const void* lut;       // the tensor's tables in scratch
  const TensorDesc* gdesc;  // the descriptor in scratch (readable before the block's barrier)
};
__device__ __forceinline__ BlockSetup block_setup(uint4* dynamic_smem, std::uint8_t* scratch,
                                                  std::uint64_t descs_offset, const WorkItem& item,
                                                  std::uint32_t ring_warps, bool with_luts,
                                                  std::uint32_t static_tiles = 0, bool defer_lut_wait = false) {
  BlockSetup b;
  b.smem0 = static_cast<std::uint32_t>(__cvta_generic_to_shared(dynamic_smem));
  // The tensor's prob_bits decides the table size; read it before placing anything.
  const auto* gdesc = reinterpret_cast<const TensorDesc*>(scratch + descs_offset) + item.tensor;
  const std::uint32_t lut_bytes = with_luts ? gdesc->lut_bytes : 0;
  b.ring0 = (b.smem0 + lut_bytes + kRingBytes - 1) & ~static_cast<std::uint32_t>(kRingBytes - 1);
  const std::uint32_t desc_s = b.ring0 + ring_warps * kRingBytes;
  b.desc_words = reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::uint8_t*>(dynamic_smem) + (desc_s - b.smem0));
  b.next_tile = b.desc_words + kDescWords;
  for (std::uint32_t i = threadIdx.x; i < static_cast<std::uint32_t>(kDescWords); i += blockDim.x) {
    b.desc_words[i] = reinterpret_cast<const std::uint32_t*>(gdesc)[i];  // blocks may have fewer threads than words
  }
  if (threadIdx.x == 0) *b.next_tile = item.tile_begin + static_tiles;
  b.lut = scratch + gdesc->lut_offset;
  b.gdesc = gdesc;
  if (with_luts) {
    const std::uint32_t n16 = lut_bytes / 16;
    const uint4* src = static_cast<const uint4*>(b.lut);
    for (std::uint32_t i = threadIdx.x; i < n16; i += blockDim.x) cp_async16_s(b.smem0 + i * 16, src + i);
    cp_async_commit();
    if (!defer_lut_wait) cp_async_wait_all();
  }
  return b;
}
// Waits for this thread's cp.async copies (the tables of a deferred block_setup among them) and then for the block:
// after it every table, the descriptor copy and the tile counter are visible to every thread.
// barrier.sync without .aligned: the warps of a block reach it from different places (a tile's start, or the kernel
// for a warp without a tile), which __syncthreads (bar.sync, .aligned) does not allow.
__device__ __forceinline__ void join_block_after_tables() {
  cp_async_wait_all();
  asm volatile("barrier.sync 0;" ::: "memory");
}
// The next tile for this warp from the block's counter (every lane gets it).
__device__ __forceinline__ std::uint32_t next_block_tile(std::uint32_t* next_tile) {
  std::uint32_t tile = 0;
  if ((threadIdx.x & 31) == 0) tile = atomicAdd(next_tile, 1u);
  return __shfl_sync(kFull, tile, 0);
}

// One field symbol: looks up slot x & mask of the table (already offset by the coset), updates x, returns the
// decoded value. table_s: shared byte address of the table (kPackedShared); table: its first entry (kWideGlobal).
template <int kMode>
__device__ __forceinline__ int decode_field(std::uint32_t& x, std::uint32_t pb, std::uint32_t mask,
                                            const void* __restrict__ table, std::uint32_t table_s) {
  const std::uint32_t slot = x & mask;
  const std::uint32_t q = x >> pb;
  if constexpr (kMode == kWideGlobal) {
    const uint2 e = __ldg(static_cast<const uint2*>(table) + slot);
    x = (e.x >> 16) * q + (e.x & 0xffffu);
    return static_cast<int>(e.y);
  } else {
    static_assert(kMode == kPackedShared);
    const std::uint32_t e = ld_shared_u32(table_s + slot * 4);
    x = (e >> (31 - pb)) * q + (e & mask);
    return static_cast<int>(e << (pb + 1)) >> (2 * pb + 1);
  }
}

// The general group loop: every table placement, prob_bits and output format (the lean loop of decode_lean.cuh
// covers packed shared tables at prob_bits 11 only). prob_bits is a runtime value; the placement is stepped from the
// previous group where rows have at least 32 vectors (vectors go down by 32 per group, so a row is crossed at most
// once: no 64-bit division per group); the word ring is refilled once kRefillChunks chunks are free.
template <int kMode>
__device__ __forceinline__ void decode_tile(const TensorDesc& d, std::uint32_t tensor, std::uint32_t tile,
                                            const void* __restrict__ lut, std::uint32_t lut_s, std::uint32_t ring_s,
                                            DecodeStatus* status, std::uint8_t* tile_status) {
  const int lane = threadIdx.x & 31;
  const std::uint32_t ge = lanemask_ge();
  const std::uint32_t pb = d.prob_bits;
  const std::uint32_t mask = (1u << pb) - 1u;
  const std::uint32_t f0 = d.coset_f0;
  const std::uint32_t f1 = (1u << pb) - f0;
  // kTwoLevelShared: the symbol table and the value offsets follow the slot table.
  const std::uint32_t sym_s = lut_s + (static_cast<std::uint32_t>(kLutTables) << pb) * 2;
  const std::uint32_t voff_s = sym_s + (d.total_symbols + 1) * 4;

  const std::uint64_t v0 = static_cast<std::uint64_t>(tile) * d.tile_vectors;
  const std::uint32_t count =
      static_cast<std::uint32_t>(d.vectors - v0 < d.tile_vectors ? d.vectors - v0 : d.tile_vectors);
  const std::uint32_t wb = __ldg(d.offsets + tile);
  const std::uint32_t we = __ldg(d.offsets + tile + 1);
  rans::TileFault fault = rans::TileFault::kOk;
  if (wb > we || we > d.payload_words) {
    fault = rans::TileFault::kBadOffsets;
  } else {
    std::uint32_t x = __ldg(d.states + static_cast<std::uint64_t>(tile) * 32 + lane);
    std::uint32_t p2 = 2 * we;  // twice the next word index + 1: the next word read is at byte p2 - 2
    const std::uint16_t* __restrict__ payload = d.payload;

    // Staged words: chunk k (words 8k..8k+7) sits in ring slot k % kRingChunks.
    const int begin_chunk = static_cast<int>(wb / 8);
    int loaded_lo = static_cast<int>((we + 7) / 8);
    // Loads the chunks between the lowest one staged and the lowest one the ring can hold without overwriting words
    // still needed, once at least kRefillChunks are free. Safety: a group reads at most 288 words; with
    // wait_group(1) a group may only read chunks issued two groups earlier, which stay at least
    // 8 * (kRingChunks - kRefillChunks) - 7 >= 2 * 288 + 288 words deep.
    constexpr int kRefillChunks = 16;
    static_assert(8 * (kRingChunks - kRefillChunks) - 7 >= 3 * 288);
    auto refill = [&](int min_chunks) {
      const int top = static_cast<int>(((p2 >> 1) + 7) / 8);
      const int want = top > begin_chunk + kRingChunks ? top - kRingChunks : begin_chunk;
      // The last chunks of a tile (its start) are loaded as soon as they fit, however few they are.
      if (loaded_lo - want >= min_chunks || (want == begin_chunk && loaded_lo > want)) {
        for (int k = loaded_lo - 1 - lane; k >= want; k -= 32) {
          cp_async16_s(ring_s + static_cast<std::uint32_t>(k & (kRingChunks - 1)) * 16,
                       payload + static_cast<std::int64_t>(k) * 8);
        }
        loaded_lo = want;
      }
      cp_async_commit();
    };
    refill(1);
    cp_async_wait_all();
    __syncwarp();

    const std::uint32_t rem = count & 31u;
    std::uint32_t g_start = rem ? count - rem : count - 32;
    const std::uint32_t row_begin = d.row_begin;

    const bool step_rows = d.vecs_per_row >= 32;  // uniform per tensor
    GroupPlacer placer;
    auto place = [&](std::uint32_t group_start, bool lane_valid) {
      return placer.next(d, step_rows, v0, group_start, lane_valid);
    };
    Placement next = place(g_start, rem == 0 || static_cast<std::uint32_t>(lane) < rem);

    // One group of up to 32 vectors; kPartial only for the tile's last (first decoded) group of rem vectors.
    auto group = [&](auto partial_tag, std::uint32_t n_valid) {
      constexpr bool kPartial = decltype(partial_tag)::value;
      cp_async_wait_one();  // the words this group reads were issued two groups ago or earlier
      __syncwarp();
      refill(kRefillChunks);
      const bool valid = !kPartial || static_cast<std::uint32_t>(lane) < n_valid;
      // This group's placement comes from the previous group (software-pipelined scale load); fetch the next one's
      // now, so its load latency hides behind this group's symbol chain.
      const Placement here = next;
      if (g_start != 0) next = place(g_start - 32, true);
      const bool store = valid && here.store;
      const std::uint32_t row = here.row, col = here.col;
      const float scale = here.scale;

      auto renorm = [&]() {
        const bool need = valid && x < kStateLow;
        const std::uint32_t vote = __ballot_sync(kFull, need);
        if (need) {
          const std::uint32_t pre = __popc(vote & ge);
          const std::uint32_t word = ld_shared_u16(ring_s | ((p2 - 2 * pre) & (kRingBytes - 2)));
          x = __byte_perm(word, x, 0x5410);  // (x << 16) | word in one PRMT; x < 2^15 here
        }
        p2 -= 2 * __popc(vote);
      };

      int c = 0;
      if (valid) {
        const std::uint32_t slot = x & mask;
        c = slot >= f0 ? 1 : 0;
        x = (c ? f1 : f0) * (x >> pb) + slot - (c ? f0 : 0u);
      }
      renorm();
      int z[8];
      const std::uint32_t cbase = static_cast<std::uint32_t>(c) << pb;  // table 1 + 2f + c, offset by table 1
#pragma unroll
      for (int f = 0; f < 8; ++f) {
        if constexpr (kMode == kTwoLevelShared) {
          if (valid) {
            const std::uint32_t slot = x & mask;
            const std::uint32_t q = x >> pb;
            const std::uint32_t g = ld_shared_u16(opaque(lut_s + (cbase + ((2u * f) << pb)) * 2) + slot * 2);
            const std::uint32_t e = ld_shared_u32(sym_s + g * 4);
            x = (e >> 16) * q + slot - (e & 0xffffu);
            z[f] = static_cast<int>(g + ld_shared_u32(voff_s + (2 * f + c) * 4));
          }
        } else if (valid) {
          const std::uint32_t table_offset = (cbase + ((2u * f) << pb)) * (kMode == kWideGlobal ? 8u : 4u);
          z[f] = decode_field<kMode>(x, pb, mask, static_cast<const std::uint8_t*>(lut) + table_offset,
                                     opaque(lut_s + table_offset));
        }
        renorm();
      }
      if (store) {
        int parity = 0;
#pragma unroll
        for (int f = 0; f < 7; ++f) parity += z[f];
        z[7] = 2 * z[7] + (parity & 1);
        const std::uint64_t elem = static_cast<std::uint64_t>(row - row_begin) * d.cols + col;
        const int n = d.cols - col < 8 ? static_cast<int>(d.cols - col) : 8;
        store_vector(d, elem, n, (d.cols & 7u) == 0, z, c, scale);
        if (d.row_scales != nullptr && col == 0) {
          d.row_scales[row - row_begin] = __fmul_rn(scale, d.int8_half_over_gain);
        }
      }
    };

    if (rem) {
      group(std::true_type{}, rem);
    } else {
      group(std::false_type{}, 32);
    }
    while (g_start != 0) {
      g_start -= 32;
      group(std::false_type{}, 32);
    }
    cp_async_wait_all();
    fault = tile_end_fault(p2, x, wb, we);
  }
  record_tile(d, tensor, tile, fault, status, tile_status);
}

// The general kernel's compile-time choices: the table placement and the block shape (decode_desc.h).
template <int kMode, class Block>
struct GeneralPolicy {
  static constexpr int kLutMode = kMode;
  using Shape = Block;  // a BlockShape
  static_assert(kMode >= 0 && kMode < kLutModes);
};

// Scratch holds the descriptors, work items and tables at the plan's offsets; the status after them. Dynamic shared
// memory: [tables (the shared placements)][pad to 2 KiB][one 2 KiB word ring per warp][descriptor][tile counter].
template <class Policy>
__global__ void __launch_bounds__(Policy::Shape::kThreads, 1)
    lattice_decode_kernel(std::uint8_t* __restrict__ scratch, std::uint64_t descs_offset, std::uint64_t items_offset,
                          std::uint64_t status_offset, std::uint64_t tile_status_offset) {
  constexpr int kMode = Policy::kLutMode;
  extern __shared__ uint4 dynamic_smem[];
  const WorkItem item = reinterpret_cast<const WorkItem*>(scratch + items_offset)[blockIdx.x];
  const BlockSetup b = block_setup(dynamic_smem, scratch, descs_offset, item, blockDim.x / 32, lut_in_shared(kMode));
  __syncthreads();
  const TensorDesc d = *reinterpret_cast<const TensorDesc*>(b.desc_words);  // into registers
  auto* status = reinterpret_cast<DecodeStatus*>(scratch + status_offset);
  auto* tile_status = scratch + tile_status_offset;
  const std::uint32_t ring_s = b.ring0 + (threadIdx.x / 32) * kRingBytes;
  for (;;) {
    const std::uint32_t tile = next_block_tile(b.next_tile);
    if (tile >= item.tile_end) break;
    decode_tile<kMode>(d, item.tensor, tile, b.lut, b.smem0, ring_s, status, tile_status);
  }
}

}  // namespace epk::cuda::detail
