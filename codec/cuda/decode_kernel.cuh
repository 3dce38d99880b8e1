// The fused lattice-rans decode kernel. One warp decodes one tile at a time: 32 interleaved rANS states (lane i owns
// vectors i, i+32, ... of the tile), 9 symbols per vector (the coset, then z1..z7 and m under that coset's tables),
// then the E8 inverse, the row scale and the output conversion, stored as one 16-byte (or 8/32-byte) write per lane.
//
// Why it looks like this:
// - Each renormalisation reads at most one 16-bit word; a ballot and a popcount of the lower lanes give every lane
//   its word without a prefix-sum pass (lanes wrote in ascending order, the decoder walks backwards).
// - The state chain (lookup -> multiply-add -> compare -> word) is the critical path, so the words come from shared
//   memory: each warp stages its tile's words in a 2 KiB ring with cp.async, one group (32 vectors) ahead, so a state
//   update never waits on a global load.
// - The 16 field tables are packed into one 32-bit entry per slot (delta, freq-1, signed value); with prob_bits <= 11
//   they fit in shared memory (128 KiB), otherwise they are read through L1. The coset table has two symbols and is
//   decoded arithmetically from the frequency of coset 0.
// - The partial group (count % 32 vectors) at the tile's end is decoded first, as the encoder emitted it last.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "codec/cuda/decode.h"
#include "codec/cuda/decode_desc.h"

namespace epk::cuda::detail {

constexpr std::uint32_t kFull = 0xffffffffu;
constexpr std::uint32_t kStateLow = 1u << 15;

__device__ __forceinline__ std::uint32_t lanemask_ge() {
  std::uint32_t m;
  asm("mov.u32 %0, %%lanemask_ge;" : "=r"(m));
  return m;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
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
  if (wide) {
    switch (format) {
      case OutputFormat::kBf16: {
        uint4 w;
        w.x = bf16_bits(v[0]) | (bf16_bits(v[1]) << 16);
        w.y = bf16_bits(v[2]) | (bf16_bits(v[3]) << 16);
        w.z = bf16_bits(v[4]) | (bf16_bits(v[5]) << 16);
        w.w = bf16_bits(v[6]) | (bf16_bits(v[7]) << 16);
        reinterpret_cast<uint4*>(d.out)[elem / 8] = w;
        return;
      }
      case OutputFormat::kFp16: {
        uint4 w;
        w.x = fp16_bits(v[0]) | (fp16_bits(v[1]) << 16);
        w.y = fp16_bits(v[2]) | (fp16_bits(v[3]) << 16);
        w.z = fp16_bits(v[4]) | (fp16_bits(v[5]) << 16);
        w.w = fp16_bits(v[6]) | (fp16_bits(v[7]) << 16);
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
            make_uint2(b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24), b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24));
        return;
      }
      case OutputFormat::kInt8Rowwise: {
        const bool exact = d.int8_gain == 1.0f;
        std::uint32_t b[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) b[j] = int8_bits(2 * z[j] + c, d.int8_gain, exact);
        reinterpret_cast<uint2*>(d.out)[elem / 8] =
            make_uint2(b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24), b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24));
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
    }
  }
}

template <bool kSharedLut, bool kStaged>
__device__ __forceinline__ void decode_tile(const TensorDesc& d, std::uint32_t tensor, std::uint32_t tile,
                                            const std::uint32_t* __restrict__ lut, std::uint16_t* ring,
                                            DecodeStatus* status, std::uint8_t* tile_status) {
  const int lane = threadIdx.x & 31;
  const std::uint32_t ge = lanemask_ge();
  const std::uint32_t pb = d.prob_bits;
  const std::uint32_t mask = (1u << pb) - 1u;
  const std::uint32_t f0 = d.coset_f0;
  const std::uint32_t f1 = (1u << pb) - f0;

  const std::uint64_t v0 = static_cast<std::uint64_t>(tile) * d.tile_vectors;
  const std::uint32_t count =
      static_cast<std::uint32_t>(d.vectors - v0 < d.tile_vectors ? d.vectors - v0 : d.tile_vectors);
  const std::uint32_t wb = __ldg(d.offsets + tile);
  const std::uint32_t we = __ldg(d.offsets + tile + 1);
  TileFault fault = TileFault::kOk;
  if (wb > we || we > d.payload_words) {
    fault = TileFault::kBadOffsets;
  } else {
    std::uint32_t x = __ldg(d.states + static_cast<std::uint64_t>(tile) * 32 + lane);
    std::uint32_t p = we;  // next word read is p - 1; decreases by the words read
    const std::uint16_t* __restrict__ payload = d.payload;

    // Staged words: chunk k (words 8k..8k+7) sits in ring slot k % kRingChunks.
    const std::uint32_t begin_chunk = wb / 8;
    std::uint32_t loaded_lo = (we + 7) / 8;
    auto refill = [&]() {
      const std::uint32_t top = (p + 7) / 8;
      const std::uint32_t want = top > begin_chunk + kRingChunks ? top - kRingChunks : begin_chunk;
      if (want < loaded_lo) {
        for (std::int64_t k = static_cast<std::int64_t>(loaded_lo) - 1 - lane; k >= static_cast<std::int64_t>(want);
             k -= 32) {
          cp_async16(ring + (k % kRingChunks) * 8, payload + k * 8);
        }
        loaded_lo = want;
      }
      cp_async_commit();
    };
    if constexpr (kStaged) {
      refill();
      cp_async_wait_all();
      __syncwarp();
    }

    auto renorm = [&](bool valid) {
      const bool need = valid && x < kStateLow;
      const std::uint32_t vote = __ballot_sync(kFull, need);
      if (need) {
        const std::uint32_t pos = p - __popc(vote & ge);
        std::uint32_t word;
        if constexpr (kStaged) {
          word = ring[pos % kRingWords];
        } else {
          word = (pos - wb < we - wb) ? __ldg(payload + pos) : 0u;
        }
        x = (x << 16) | word;
      }
      p -= __popc(vote);
    };

    const std::uint32_t rem = count & 31u;
    std::uint32_t g_start = rem ? count - rem : count - 32;
    std::uint32_t n_valid = rem ? rem : 32;
    const std::uint32_t row_begin = d.row_begin, row_end = d.row_end;
    for (;;) {
      if constexpr (kStaged) {
        cp_async_wait_all();
        __syncwarp();
        refill();
      }
      const bool valid = static_cast<std::uint32_t>(lane) < n_valid;
      int c = 0;
      if (valid) {
        const std::uint32_t slot = x & mask;
        c = slot >= f0 ? 1 : 0;
        const std::uint32_t start = c ? f0 : 0u;
        const std::uint32_t freq = c ? f1 : f0;
        x = freq * (x >> pb) + slot - start;
      }
      renorm(valid);
      int z[8];
      const std::uint32_t cbase = static_cast<std::uint32_t>(c) << pb;
#pragma unroll
      for (int f = 0; f < 8; ++f) {
        if (valid) {
          const std::uint32_t slot = x & mask;
          const std::uint32_t idx = cbase + ((2u * f) << pb) + slot;
          const std::uint32_t e = kSharedLut ? lut[idx] : __ldg(lut + idx);
          const std::uint32_t q = x >> pb;
          x = ((e >> pb) & mask) * q + q + (e & mask);
          z[f] = static_cast<int>(e) >> (2 * pb);
        }
        renorm(valid);
      }
      if (valid) {
        int parity = 0;
#pragma unroll
        for (int f = 0; f < 7; ++f) parity += z[f];
        z[7] = 2 * z[7] + (parity & 1);
        const std::uint64_t vec = v0 + g_start + lane;
        const std::uint32_t row = static_cast<std::uint32_t>(vec / d.vecs_per_row);
        if (row >= row_begin && row < row_end) {
          const std::uint32_t col = static_cast<std::uint32_t>(vec - static_cast<std::uint64_t>(row) * d.vecs_per_row) * 8;
          if (col < d.cols) {
            const float scale = __ldg(d.scales + row);
            const std::uint64_t elem = static_cast<std::uint64_t>(row - row_begin) * d.cols + col;
            // Wide stores need every row to start on a vector boundary; otherwise store element by element.
            const int n = d.cols - col < 8 ? static_cast<int>(d.cols - col) : 8;
            store_vector(d, elem, n, (d.cols & 7u) == 0, z, c, scale);
            if (d.row_scales != nullptr && col == 0) d.row_scales[row - row_begin] = __fmul_rn(scale, d.int8_half_over_gain);
          }
        }
      }
      if (g_start == 0) break;
      g_start -= 32;
      n_valid = 32;
    }
    if constexpr (kStaged) cp_async_wait_all();
    const bool states_ok = __all_sync(kFull, x == kStateLow);
    if (p > we) {
      fault = TileFault::kUnderflow;  // p wrapped below zero: a word before the tile start was needed
    } else if (p != wb) {
      fault = p > wb ? TileFault::kNotDrained : TileFault::kUnderflow;
    } else if (!states_ok) {
      fault = TileFault::kBadFinalState;
    }
  }
  if (lane == 0) {
    tile_status[d.tile_base + (tile - d.first_tile)] = static_cast<std::uint8_t>(fault);
    if (fault != TileFault::kOk) {
      atomicAdd(&status->bad_tiles, 1u);
      atomicMax(reinterpret_cast<unsigned long long*>(&status->first_bad_inverted),
                ~((static_cast<unsigned long long>(tensor) << 32) | tile));
    }
  }
}

// Scratch holds the descriptors, work items and tables at the plan's offsets; the status after them.
template <bool kSharedLut, bool kStaged>
__global__ void __launch_bounds__(kMaxWarpsPerBlock * 32, 1)
    lattice_decode_kernel(std::uint8_t* __restrict__ scratch, std::uint64_t descs_offset, std::uint64_t items_offset,
                          std::uint64_t status_offset, std::uint64_t tile_status_offset) {
  extern __shared__ uint4 dynamic_smem[];
  __shared__ TensorDesc desc;
  __shared__ std::uint32_t next_tile;

  const WorkItem item = reinterpret_cast<const WorkItem*>(scratch + items_offset)[blockIdx.x];
  if (threadIdx.x < 32) {
    const std::uint32_t* src = reinterpret_cast<const std::uint32_t*>(
        reinterpret_cast<const TensorDesc*>(scratch + descs_offset) + item.tensor);
    reinterpret_cast<std::uint32_t*>(&desc)[threadIdx.x] = src[threadIdx.x];
  }
  if (threadIdx.x == 0) next_tile = item.tile_begin;
  __syncthreads();
  const TensorDesc d = desc;  // into registers: the hot fields stay there across the asm memory clobbers
  const std::uint32_t* lut = reinterpret_cast<const std::uint32_t*>(scratch + d.lut_offset);
  std::uint8_t* smem_bytes = reinterpret_cast<std::uint8_t*>(dynamic_smem);
  std::size_t lut_bytes = 0;
  if constexpr (kSharedLut) {
    const std::uint32_t n16 = (static_cast<std::uint32_t>(kLutTables) << d.prob_bits) / 4;
    const uint4* src = reinterpret_cast<const uint4*>(lut);
    for (std::uint32_t i = threadIdx.x; i < n16; i += blockDim.x) dynamic_smem[i] = src[i];
    lut = reinterpret_cast<const std::uint32_t*>(dynamic_smem);
    lut_bytes = static_cast<std::size_t>(n16) * 16;
    __syncthreads();
  }
  std::uint16_t* ring = reinterpret_cast<std::uint16_t*>(smem_bytes + lut_bytes) + (threadIdx.x / 32) * kRingWords;
  auto* status = reinterpret_cast<DecodeStatus*>(scratch + status_offset);
  auto* tile_status = scratch + tile_status_offset;

  for (;;) {
    std::uint32_t tile = 0;
    if ((threadIdx.x & 31) == 0) tile = atomicAdd(&next_tile, 1u);
    tile = __shfl_sync(kFull, tile, 0);
    if (tile >= item.tile_end) break;
    decode_tile<kSharedLut, kStaged>(d, item.tensor, tile, lut, ring, status, tile_status);
  }
}

}  // namespace epk::cuda::detail
