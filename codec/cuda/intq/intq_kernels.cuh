// Device helpers and kernels of intq_repack.cu. The repacks give one thread per output word (reads of neighbouring
// threads fall in the same or neighbouring input words); dequantization transposes [K, N] into [N, K] through
// shared-memory tiles so that reads and writes both coalesce. Their times: docs/measurements/intq-repack.md.
#pragma once

// tests/codec/cuda/intq_kernels_host_test.cc compiles these kernels on the host (one std::thread per CUDA thread,
// a barrier for __syncthreads) to check their indexing without a GPU; it supplies the CUDA names itself.
#ifndef EPK_INTQ_HOST_EMULATION
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cstdint>

namespace epk::cuda::intq::detail {

// Code `index` of an LSB-first stream of `bits`-bit values (values may straddle two words).
__device__ __forceinline__ std::uint32_t load_code(const std::uint32_t* __restrict__ words, std::uint64_t index,
                                                   int bits) {
  const std::uint64_t pos = index * static_cast<std::uint64_t>(bits);
  const std::uint64_t w = pos >> 5;
  const int off = static_cast<int>(pos & 31);
  std::uint32_t v = __ldg(words + w) >> off;
  if (off + bits > 32) v |= __ldg(words + w + 1) << (32 - off);
  return v & ((1u << bits) - 1u);
}

struct Geometry {
  int bits;
  std::int64_t rows, cols, padded_rows, padded_cols, group_size;
};

inline constexpr int kTile = 32;     // dequantize: 32 x 32 tiles through shared memory (a transpose)
inline constexpr int kTileRows = 8;  // threads per tile column: blockDim = (32, 8)

template <bool kBf16>
__device__ __forceinline__ std::uint16_t dequantize_one(const std::uint32_t* __restrict__ codes,
                                                        const float* __restrict__ scales,
                                                        const std::uint32_t* __restrict__ zeros,
                                                        const std::int32_t* __restrict__ g_idx, const Geometry& g,
                                                        std::int64_t k, std::int64_t n) {
  const std::int64_t grp = g_idx ? __ldg(g_idx + k) : k / g.group_size;
  const std::uint64_t gi = static_cast<std::uint64_t>(grp) * g.padded_cols + n;
  const int q = static_cast<int>(load_code(codes, static_cast<std::uint64_t>(k) * g.padded_cols + n, g.bits));
  const int z = zeros ? static_cast<int>(load_code(zeros, gi, g.bits)) : (1 << (g.bits - 1));
  const float w = __fmul_rn(__ldg(scales + gi), static_cast<float>(q - z));  // exact: <= 24 significant bits
  if constexpr (kBf16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(w));
  } else {
    return __half_as_ushort(__float2half_rn(w));
  }
}

// The stored form is [K, N] (n fastest) and the output [N, K] (k fastest): each block dequantizes a 32 x 32 tile with
// reads along n, then writes it along k, so both sides coalesce (with a perm the writes scatter within a row).
template <bool kBf16>
__global__ void dequantize_kernel(const std::uint32_t* __restrict__ codes, const float* __restrict__ scales,
                                  const std::uint32_t* __restrict__ zeros, const std::int32_t* __restrict__ g_idx,
                                  const std::int32_t* __restrict__ perm, Geometry g, std::uint16_t* __restrict__ out) {
  __shared__ std::uint16_t tile[kTile][kTile + 1];
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  for (std::int64_t k0 = static_cast<std::int64_t>(blockIdx.y) * kTile; k0 < g.rows;
       k0 += static_cast<std::int64_t>(gridDim.y) * kTile) {
    for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
      const std::int64_t k = k0 + dy, n = n0 + threadIdx.x;
      if (k < g.rows && n < g.cols) tile[dy][threadIdx.x] = dequantize_one<kBf16>(codes, scales, zeros, g_idx, g, k, n);
    }
    __syncthreads();
    for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
      const std::int64_t n = n0 + dy, k = k0 + threadIdx.x;
      if (k < g.rows && n < g.cols) {
        const std::int64_t feature = perm ? __ldg(perm + k) : k;
        out[static_cast<std::uint64_t>(n) * g.rows + feature] = tile[threadIdx.x][dy];
      }
    }
    __syncthreads();
  }
}

// GPTQ: word (w, n) holds rows [32w / b, (32w + 31) / b] of column n, LSB first, straddling values split. row_of
// (nullable): output row r is stored row row_of[r] (the inverse of perm: GPTQ keeps rows in feature order).
__global__ void gptq_kernel(const std::uint32_t* __restrict__ codes, const std::int32_t* __restrict__ row_of,
                            Geometry g, std::uint32_t* __restrict__ out) {
  const std::uint64_t words_per_col = static_cast<std::uint64_t>(g.padded_rows) * g.bits / 32;
  const std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= words_per_col * static_cast<std::uint64_t>(g.padded_cols)) return;
  const std::uint64_t w = i / static_cast<std::uint64_t>(g.padded_cols);
  const std::uint64_t n = i % static_cast<std::uint64_t>(g.padded_cols);
  const std::int64_t first = static_cast<std::int64_t>((32 * w) / g.bits);
  const std::int64_t last = static_cast<std::int64_t>((32 * w + 31) / g.bits);
  std::uint32_t word = 0;
  for (std::int64_t k = first; k <= last; ++k) {
    const std::uint64_t src = row_of ? static_cast<std::uint64_t>(__ldg(row_of + k)) : static_cast<std::uint64_t>(k);
    const std::uint32_t c = load_code(codes, src * g.padded_cols + n, g.bits);
    const std::int64_t shift = k * g.bits - static_cast<std::int64_t>(32 * w);
    word |= shift >= 0 ? (c << shift) : (c >> -shift);
  }
  out[i] = word;
}

// AWQ: word (k, c) slot s (bits 4s) holds column 8c + order[s], order = {0, 2, 4, 6, 1, 3, 5, 7}.
__global__ void awq_kernel(const std::uint32_t* __restrict__ codes, Geometry g, std::uint32_t* __restrict__ out) {
  const std::uint64_t wcols = static_cast<std::uint64_t>(g.padded_cols) / 8;
  const std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= wcols * static_cast<std::uint64_t>(g.padded_rows)) return;
  const std::uint64_t k = i / wcols, c = i % wcols;
  // The 8 codes of columns 8c..8c+7 of row k are one aligned 32-bit word of the logical stream (padded_cols % 8 == 0).
  const std::uint32_t logical = __ldg(codes + (k * g.padded_cols + 8 * c) / 8);
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::uint32_t word = 0;
#ifdef __CUDACC__  // the host emulation's compiler does not know the pragma
#pragma unroll
#endif
  for (int s = 0; s < 8; ++s) word |= ((logical >> (4 * kOrder[s])) & 0xFu) << (4 * s);
  out[i] = word;
}

// Marlin: value v of the output stream is tiled value base(v) + perm[v % 1024]; tiled index T of row block r holds
// (k, n) = (16r + i, 16t + j) with T = r * 16N + t * 256 + i * 16 + j. row_of (nullable): row k is stored row
// row_of[k] (act-order: the rows sorted by group, group_order_kernel).
__global__ void marlin_kernel(const std::uint32_t* __restrict__ codes, const int* __restrict__ perm,
                              const std::int32_t* __restrict__ row_of, Geometry g, std::uint32_t* __restrict__ out) {
  const int per_word = 32 / g.bits;
  const std::uint64_t total_words = static_cast<std::uint64_t>(g.padded_rows) * g.padded_cols / per_word;
  const std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= total_words) return;
  const std::uint64_t cols16 = 16 * static_cast<std::uint64_t>(g.padded_cols);
  std::uint32_t word = 0;
  for (int s = 0; s < per_word; ++s) {
    const std::uint64_t v = i * per_word + s;
    const std::uint64_t t_index = (v & ~std::uint64_t{1023}) + static_cast<std::uint64_t>(perm[v & 1023]);
    const std::uint64_t r = t_index / cols16, rem = t_index % cols16;
    const std::uint64_t tile = rem / 256, in_tile = rem % 256;
    const std::uint64_t k = 16 * r + in_tile / 16, n = 16 * tile + in_tile % 16;
    const std::uint64_t src = row_of ? static_cast<std::uint64_t>(__ldg(row_of + k)) : k;
    word |= load_code(codes, src * g.padded_cols + n, g.bits) << (g.bits * s);
  }
  out[i] = word;
}

// GPTQ qzeros: row r of [rows, row_len] values repacked as row_len * bits / 32 words per row, the same LSB-first
// stream restarted at every row. values == nullptr: every value is `fill`. minus_one (GPTQ v1): each value v is
// stored as (v - 1) & mask, and a v of 0 (which v1 cannot hold) sets bit kZeroPointZero of *flags.
inline constexpr std::uint32_t kZeroPointZero = 1;     // flags: a v1 zero point of 0 was met
inline constexpr std::uint32_t kPaddingSortsInside = 2;  // flags: group_order moved a padding row into the logical rows
__global__ void pack_rows_kernel(const std::uint32_t* __restrict__ values, std::uint32_t fill, std::int64_t rows,
                                 std::int64_t row_len, int bits, bool minus_one, std::uint32_t* __restrict__ flags,
                                 std::uint32_t* __restrict__ out) {
  const std::uint64_t words_per_row = static_cast<std::uint64_t>(row_len) * bits / 32;
  const std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= words_per_row * static_cast<std::uint64_t>(rows)) return;
  const std::uint64_t r = i / words_per_row, w = i % words_per_row;
  const std::int64_t first = static_cast<std::int64_t>((32 * w) / bits);
  const std::int64_t last = static_cast<std::int64_t>((32 * w + 31) / bits);
  std::uint32_t word = 0;
  for (std::int64_t c = first; c <= last; ++c) {
    std::uint32_t v = values ? load_code(values, r * static_cast<std::uint64_t>(row_len) + c, bits) : fill;
    if (minus_one) {
      if (v == 0 && flags != nullptr) atomicOr(flags, kZeroPointZero);  // idempotent: a straddling value is met twice
      v = (v - 1u) & ((1u << bits) - 1u);
    }
    const std::int64_t shift = c * bits - static_cast<std::int64_t>(32 * w);
    word |= shift >= 0 ? (v << shift) : (v >> -shift);
  }
  out[i] = word;
}

// Scales [groups, cols] from float32 to bf16/fp16, each block of `block` values gathered through sperm (Marlin's
// scale permutation) or copied in order (sperm == nullptr).
template <bool kBf16>
__global__ void scales_kernel(const float* __restrict__ scales, std::uint64_t count, const int* __restrict__ sperm,
                              int block, std::uint16_t* __restrict__ out) {
  const std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const std::uint64_t src = sperm ? (i - i % block) + static_cast<std::uint64_t>(sperm[i % block]) : i;
  const float s = __ldg(scales + src);
  if constexpr (kBf16) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(s));
  } else {
    out[i] = __half_as_ushort(__float2half_rn(s));
  }
}

// inv[perm[k]] = k for k < n: the stored row of each feature. perm is a permutation of 0..n-1 when read_int read it;
// an entry out of range (a caller that built the tensor itself) is skipped rather than written out of bounds.
__global__ void invert_perm_kernel(const std::int32_t* __restrict__ perm, std::int64_t n,
                                   std::int32_t* __restrict__ inv) {
  const std::uint64_t k = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (k >= static_cast<std::uint64_t>(n)) return;
  const std::int32_t p = __ldg(perm + k);
  if (p >= 0 && p < n) inv[p] = static_cast<std::int32_t>(k);
}

// out[r] = values[src] (values nullable: src / divisor) with src = row_of ? row_of[r] : r, for r < n. Gives GPTQ's
// g_idx in feature order (values g_idx or null with divisor G, row_of the inverse perm) and Marlin's sorted g_idx and
// perm (row_of the group order; perm null with divisor 1 is the order itself).
__global__ void gather_rows_kernel(const std::int32_t* __restrict__ values, std::int64_t divisor,
                                   const std::int32_t* __restrict__ row_of, std::int64_t n,
                                   std::int32_t* __restrict__ out) {
  const std::uint64_t r = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (r >= static_cast<std::uint64_t>(n)) return;
  const std::int64_t src = row_of ? __ldg(row_of + r) : static_cast<std::int64_t>(r);
  out[r] = values ? __ldg(values + src) : static_cast<std::int32_t>(src / divisor);
}

// The stable argsort of g_idx (sort_groups' row order), one block per group (blockIdx.x = g, at most
// kGroupOrderMaxThreads threads): group g's rows start after every row of a smaller group (a block-wide count) and keep
// their order: the block walks the rows in chunks of blockDim.x, and a row of group g goes to the next free position
// plus the number of group-g rows before it in its chunk (an inclusive scan in shared memory). g_idx nullable:
// k / group_size (already sorted). A padding row (>= rows) placed among the first `rows` positions sets
// kPaddingSortsInside in *flags (the CPU's sort_groups refuses that tensor). (The first form, one thread per group
// scanning every row, took 565 us for 4096 rows in 32 groups on an H200.)
inline constexpr unsigned kGroupOrderMaxThreads = 256;
__global__ void group_order_kernel(const std::int32_t* __restrict__ g_idx, std::int64_t group_size,
                                   std::int64_t rows, std::int64_t padded_rows, std::uint32_t* __restrict__ flags,
                                   std::int32_t* __restrict__ order) {
  __shared__ std::int64_t scan[kGroupOrderMaxThreads];
  const std::int64_t g = blockIdx.x;
  const unsigned t = threadIdx.x, width = blockDim.x;
  auto group_of = [&](std::int64_t k) -> std::int64_t { return g_idx ? __ldg(g_idx + k) : k / group_size; };
  std::int64_t before = 0;
  for (std::int64_t k = t; k < padded_rows; k += width) before += group_of(k) < g;
  scan[t] = before;
  __syncthreads();
  std::int64_t pos = 0;
  for (unsigned i = 0; i < width; ++i) pos += scan[i];  // every thread the same sum: no broadcast step needed
  __syncthreads();
  for (std::int64_t chunk = 0; chunk < padded_rows; chunk += width) {
    const std::int64_t k = chunk + t;
    const bool member = k < padded_rows && group_of(k) == g;
    scan[t] = member ? 1 : 0;
    __syncthreads();
    for (unsigned off = 1; off < width; off <<= 1) {
      const std::int64_t add = t >= off ? scan[t - off] : 0;
      __syncthreads();
      scan[t] += add;
      __syncthreads();
    }
    if (member) {
      const std::int64_t p = pos + scan[t] - 1;
      if (p < rows && k >= rows && flags != nullptr) atomicOr(flags, kPaddingSortsInside);
      order[p] = static_cast<std::int32_t>(k);
    }
    pos += scan[width - 1];
    __syncthreads();  // every thread has read scan[width - 1] before the next chunk overwrites it
  }
}

}  // namespace epk::cuda::intq::detail
