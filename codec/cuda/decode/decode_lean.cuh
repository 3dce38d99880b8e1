// The lean group loop: the general loop of decode_kernel.cuh specialised for what serves the 2 and 4 bpp streams
// (packed tables in shared memory, prob_bits a template parameter, 11 being the only one built), with fewer
// instructions per symbol and per group, and groups without branches. Same output bit for bit; its plain reference is
// codec/rans's decoder, which the tests in tests/codec/cuda compare it against.
//
// Why it looks like this (against the general loop's SASS: docs/decisions/gpu-decoder.md):
// - prob_bits is a template parameter, so the eight field tables of a coset sit at compile-time offsets from one
//   per-lane base: each lookup is slot = x & mask, one LEA and an LDS with an immediate offset (no table pointer
//   recomputed per symbol).
// - The eight packed entries are kept and the values extracted after the last symbol, off the state chain.
// - bf16 (kBf16): the value field is turned into a float without I2F: (e & vmask) ^ (sign | 2^23 bits) is the float
//   2^23 + (value + 2^(vb-1)) * 2^pb, so (z + c/2) * 2^pb is one exact FADD away and the row scale is applied as
//   scale * 2^-pb (exact: the plan takes this path only where every scale is 0, NaN or at least 2^-115, so
//   scale * 2^-pb is a normal float and the product rounds exactly as (z + c/2) * scale does; and only where no
//   value can reach the bf16 clamp, so no scale is infinite). The parity of z0..z6
//   is the low value bit of the XOR of their entries.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "codec/cuda/decode/decode_kernel.cuh"

namespace epk::cuda::detail {

template <int kOffset>
__device__ __forceinline__ std::uint32_t ld_shared_u32_at(std::uint32_t addr) {
  std::uint32_t v;
  asm("ld.shared.u32 %0, [%1+%2];" : "=r"(v) : "r"(addr), "n"(kOffset));
  return v;
}

// (a & b) ^ c in one LOP3 (two constants cannot both be immediates, so the compiler would split it).
__device__ __forceinline__ std::uint32_t and_xor(std::uint32_t a, std::uint32_t b, std::uint32_t c) {
  std::uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// One decoded vector from its eight packed entries e (value fields) and coset c. lean_bf16_vector gives the 16 bytes
// of a bf16 vector (the plan takes it only where rows are vector-aligned and at least 32 vectors long, every scale is
// 0, NaN or >= 2^-115 and no value can need the bf16 clamp); lean_store_general stores any format at (row, col).
template <int kPb>
__device__ __forceinline__ uint4 lean_bf16_vector(const std::uint32_t* e, std::uint32_t c, float scale) {
  constexpr int kVb = 31 - 2 * kPb;
  constexpr std::uint32_t kVmask = ((1u << kVb) - 1u) << kPb;
  constexpr std::uint32_t kFlip = (1u << (kPb + kVb - 1)) | 0x4B000000u;  // value sign bit, 2^23
  const std::uint32_t vmask = opaque(kVmask), flip = opaque(kFlip);  // registers: one LOP3 per value
  // (z + c/2) * 2^pb = F - K with F = 2^23 + (z + 2^(vb-1)) * 2^pb, K = 2^23 + 2^(vb-1+pb) - c * 2^(pb-1).
  const float k0 = __uint_as_float(0x4B000000u + (1u << (kVb - 1 + kPb)) - (c << (kPb - 1)));
  const float s = __fmul_rn(scale, 1.0f / static_cast<float>(1u << kPb));
  float v[8];
#pragma unroll
  for (int j = 0; j < 7; ++j) v[j] = __fmul_rn(__fsub_rn(__uint_as_float(and_xor(e[j], vmask, flip)), k0), s);
  // z7' = 2 z7 + parity(z0..z6): (z7' + c/2) * 2^pb = 2 F7 - K7, K7 = 2^24 + 2^(vb+pb) - par 2^pb - c 2^(pb-1)
  // (a multiple of 2^(pb-1) in [2^24, 2^25): its bits are 0x4B800000 + (K7 - 2^24) / 2).
  const std::uint32_t x7 = e[0] ^ e[1] ^ e[2] ^ e[3] ^ e[4] ^ e[5] ^ e[6];
  const std::uint32_t k7 =
      0x4B800000u + (1u << (kVb + kPb - 1)) - ((x7 >> 1) & (1u << (kPb - 1))) - (c << (kPb - 2));
  v[7] = __fmul_rn(__fmaf_rn(__uint_as_float(and_xor(e[7], vmask, flip)), 2.0f, -__uint_as_float(k7)), s);
  return make_uint4(bf16x2_bits(v[0], v[1]), bf16x2_bits(v[2], v[3]), bf16x2_bits(v[4], v[5]),
                    bf16x2_bits(v[6], v[7]));
}
// The 16-byte destination of the vector at (row, col) in a bf16 output whose rows are vector-aligned.
__device__ __forceinline__ std::uint64_t bf16_vector_dst(const TensorDesc& d, std::uint32_t row, std::uint32_t col) {
  return reinterpret_cast<std::uint64_t>(d.out) +
         2 * (static_cast<std::uint64_t>(row - d.row_begin) * d.cols + col);
}
template <int kPb>
__device__ __forceinline__ void lean_store_general(const TensorDesc& d, const std::uint32_t* e, std::uint32_t c,
                                                   std::uint32_t row, std::uint32_t col, float scale) {
  const std::uint64_t elem = static_cast<std::uint64_t>(row - d.row_begin) * d.cols + col;
  int z[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) z[j] = static_cast<int>(e[j] << (kPb + 1)) >> (2 * kPb + 1);
  int parity = 0;
#pragma unroll
  for (int j = 0; j < 7; ++j) parity += z[j];
  z[7] = 2 * z[7] + (parity & 1);
  const int n = d.cols - col < 8 ? static_cast<int>(d.cols - col) : 8;
  store_vector(d, elem, n, (d.cols & 7u) == 0, z, static_cast<int>(c), scale);
  if (d.row_scales != nullptr && col == 0) {
    d.row_scales[row - d.row_begin] = __fmul_rn(scale, d.int8_half_over_gain);
  }
}

// bf16: each group's vector is converted and stored during the next group, in the same basic block as that
// group's symbol chain, so its ~40 instructions need not sit between two chains (a warp issues in order; ptxas puts
// them beside the coset step and the refill). It holds one pending vector in registers, yet ptxas fits the
// 64-register form in 56.
// syncs_block: this is the warp's first tile, started while the block's tables are still arriving (block_setup's
// defer_lut_wait); the tile waits for them and joins the block's barrier once its own first loads are in flight.
template <int kPb, bool kBf16>
__device__ __forceinline__ void decode_tile_lean(const TensorDesc& d, std::uint32_t tensor, std::uint32_t tile,
                                                 std::uint32_t lut_s, std::uint32_t ring_s, DecodeStatus* status,
                                                 std::uint8_t* tile_status, bool syncs_block) {
  constexpr std::uint32_t kMask = (1u << kPb) - 1u;
  constexpr int kVb = 31 - 2 * kPb;  // value bits in a packed entry
  static_assert(kVb >= 2);
  const int lane = threadIdx.x & 31;
  const std::uint32_t ge = lanemask_ge();
  const std::uint32_t f0 = d.coset_f0;
  const std::uint32_t f1 = (1u << kPb) - f0;

  const std::uint64_t v0 = static_cast<std::uint64_t>(tile) * d.tile_vectors;
  const std::uint32_t count =
      static_cast<std::uint32_t>(d.vectors - v0 < d.tile_vectors ? d.vectors - v0 : d.tile_vectors);
  const std::uint32_t wb = __ldg(d.offsets + tile);
  const std::uint32_t we = __ldg(d.offsets + tile + 1);
  rans::TileFault fault = rans::TileFault::kOk;
  if (wb > we || we > d.payload_words) {
    fault = rans::TileFault::kBadOffsets;
    if (syncs_block) join_block_after_tables();
  } else {
    std::uint32_t x = __ldg(d.states + static_cast<std::uint64_t>(tile) * 32 + lane);
    std::uint32_t p2 = 2 * we;  // twice the next word index + 1: the next word read is at byte p2 - 2
    const std::uint16_t* __restrict__ payload = d.payload;

    // The ring: chunk k (words 8k..8k+7) in slot k % kRingChunks, filled at the tile start, then topped up every
    // group with whatever chunks have become free, without a branch (kRefillPerLane predicated cp.async per lane: a
    // group frees at most 288 words, 36 chunks). Safety: a group's words were issued at least two groups earlier (it
    // waits for all but the last commit) and lie at most 3 * 288 words below where those refills stood.
    const int begin_chunk = static_cast<int>(wb / 8);
    int loaded_lo = static_cast<int>((we + 7) / 8);
    constexpr int kRefillPerLane = 2;
    static_assert(8 * (kRingChunks - 1) - 7 >= 3 * 288 && 32 * kRefillPerLane >= 288 / 8);
    auto refill = [&]<int kPerLane>(std::integral_constant<int, kPerLane>) {
      const int top = static_cast<int>(((p2 >> 1) + 7) / 8);
      int want = top - kRingChunks > begin_chunk ? top - kRingChunks : begin_chunk;
      want = want < loaded_lo ? want : loaded_lo;  // a corrupt tile's position can wrap: never load past the tile
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int k = loaded_lo - 1 - lane - 32 * i;
        if (k >= want) {
          cp_async16_s(ring_s + static_cast<std::uint32_t>(k & (kRingChunks - 1)) * 16,
                       payload + static_cast<std::int64_t>(k) * 8);
        }
      }
      loaded_lo = want > loaded_lo - 32 * kPerLane ? want : loaded_lo - 32 * kPerLane;
    };
    __syncwarp();  // every lane's reads of the ring from the warp's previous tile are done before it is refilled
    refill(std::integral_constant<int, kRingChunks / 32>{});
    cp_async_commit();
    if (syncs_block) {
      join_block_after_tables();  // also waits for this tile's first words
    } else {
      cp_async_wait_all();
      __syncwarp();
    }

    const std::uint32_t rem = count & 31u;
    std::uint32_t g_start = rem ? count - rem : count - 32;
    const bool first_valid = rem == 0 || static_cast<std::uint32_t>(lane) < rem;
    // Placement, software-pipelined one group ahead (ptxas sinks a row-scale load issued in the group that uses it
    // next to its use, a global round trip per group). bf16: GroupPlacer's branch-free step; otherwise its next().
    const bool step_rows = d.vecs_per_row >= 32;  // uniform per tensor
    GroupPlacer placer;
    Placement next{};
    std::uint64_t dst = 0;  // bf16: this lane's 16-byte destination in the current group, 512 bytes lower each group
    if constexpr (kBf16) {
      next = placer.start(d, v0 + g_start + lane, first_valid);
      dst = bf16_vector_dst(d, next.row, next.col);
    } else {
      next = placer.next(d, step_rows, v0, g_start, first_valid);
    }
    struct Pending {
      std::uint32_t e[8];
      std::uint32_t c;
      float scale;
      std::uint64_t dst;
      bool store;
    } pending{};
    auto flush = [&]() {
      const uint4 v = lean_bf16_vector<kPb>(pending.e, pending.c, pending.scale);
      if (pending.store) *reinterpret_cast<uint4*>(pending.dst) = v;
    };

    auto group = [&](auto partial_tag, std::uint32_t n_valid) {
      constexpr bool kPartial = decltype(partial_tag)::value;
      cp_async_wait_one();  // the words this group reads were issued two groups ago or earlier
      __syncwarp();
      refill(std::integral_constant<int, kRefillPerLane>{});
      cp_async_commit();
      const bool valid = !kPartial || static_cast<std::uint32_t>(lane) < n_valid;
      Placement here{};
      if constexpr (kBf16) {
        here = next;
        next = placer.step(d, true);  // past the tile's last group: not used
      } else {
        here = next;
        if (g_start != 0) next = placer.next(d, step_rows, v0, g_start - 32, true);
      }
      if constexpr (kBf16) flush();  // the previous group's vector, scheduled into this group's chain

      // One predicate for the vote, the word load and the merge (the C++ form compiles to two compares), the
      // prefix count of the needing lanes at or above this one, the ring address and the pointer step. The step
      // comes from lane 0, whose prefix count is the whole vote's (one SHFL off the chain instead of a second POPC
      // and IMAD: docs/measurements/gpu-decode.md).
      auto renorm = [&]() {
        if constexpr (kPartial) {
          const bool need = valid && x < kStateLow;
          const std::uint32_t vote = __ballot_sync(kFull, need);
          if (need) {
            const std::uint32_t word = ld_shared_u16(ring_s | ((p2 - 2 * __popc(vote & ge)) & (kRingBytes - 2)));
            x = __byte_perm(word, x, 0x5410);
          }
          p2 -= 2 * __popc(vote);
        } else {
          asm volatile(
              "{\n"
              " .reg .pred p;\n"
              " .reg .b32 v, t, a;\n"
              " setp.lt.u32 p, %0, 32768;\n"
              " vote.sync.ballot.b32 v, p, 0xffffffff;\n"
              " and.b32 t, v, %2;\n"
              " popc.b32 t, t;\n"
              " mad.lo.u32 a, t, -2, %1;\n"
              " shfl.sync.idx.b32 %1, a, 0, 0x1f, 0xffffffff;\n"
              " and.b32 a, a, %4;\n"
              " or.b32 a, a, %3;\n"
              " @p ld.shared.u16 t, [a];\n"
              " @p prmt.b32 %0, t, %0, 0x5410;\n"
              "}\n"
              : "+r"(x), "+r"(p2)
              : "r"(ge), "r"(ring_s), "n"(kRingBytes - 2)
              : "memory");
        }
      };

      std::uint32_t c = 0;
      if (!kPartial || valid) {
        const std::uint32_t slot = x & kMask;
        c = slot >= f0 ? 1u : 0u;
        x = (c ? f1 : f0) * (x >> kPb) + slot - (c ? f0 : 0u);
      }
      renorm();
      // Field f of coset c is table 1 + 2f + c, at byte (2f + c) << (kPb + 2) from the first field table: one per-lane
      // base for the group, the field's table an immediate offset, the slot address one LOP3 and one IMAD (written
      // in PTX: the C++ form compiles to a shift, a mask and an add).
      const std::uint32_t tb = lut_s + (c << (kPb + 2));
      std::uint32_t e[8];
      auto field = [&]<int kF>(std::integral_constant<int, kF>) {
        if (!kPartial || valid) {
          std::uint32_t addr;
          asm("{\n .reg .b32 s;\n and.b32 s, %1, %3;\n mad.lo.u32 %0, s, 4, %2;\n}\n"
              : "=r"(addr)
              : "r"(x), "r"(tb), "n"(kMask));
          e[kF] = ld_shared_u32_at<static_cast<int>((2u * kF) << (kPb + 2))>(addr);
          x = (e[kF] >> (31 - kPb)) * (x >> kPb) + (e[kF] & kMask);
        } else {
          e[kF] = 0;
        }
        renorm();
      };
      [&]<int... kF>(std::integer_sequence<int, kF...>) {
        (field(std::integral_constant<int, kF>{}), ...);
      }(std::make_integer_sequence<int, 8>{});

      if constexpr (kBf16) {
#pragma unroll
        for (int j = 0; j < 8; ++j) pending.e[j] = e[j];
        pending.c = c;
        pending.scale = here.scale;
        pending.dst = dst;
        pending.store = here.store;
      } else if (here.store) {
        lean_store_general<kPb>(d, e, c, here.row, here.col, here.scale);
      }
      dst -= 512;
    };

    if (rem) {
      group(std::true_type{}, rem);
    } else {
      group(std::false_type{}, 32);
    }
    // Two groups per iteration: the pipelined placement then alternates between two sets of registers instead of
    // being copied (a one-group loop spends about 10 moves a group on it).
    while (g_start >= 64) {
      g_start -= 32;
      group(std::false_type{}, 32);
      g_start -= 32;
      group(std::false_type{}, 32);
    }
    if (g_start != 0) {
      g_start -= 32;
      group(std::false_type{}, 32);
    }
    if constexpr (kBf16) flush();
    cp_async_wait_all();
    fault = tile_end_fault(p2, x, wb, we);
  }
  record_tile(d, tensor, tile, fault, status, tile_status);
}

// The lean kernel's compile-time choices: prob_bits, the bf16-only store and the block shape (decode_desc.h).
template <int kPb, bool kBf16, class Block>
struct LeanPolicy {
  static constexpr int kProbBits = kPb;
  static constexpr bool kBf16Store = kBf16;
  using Shape = Block;  // a BlockShape
};

// The general kernel's shared-memory layout and work items with packed shared tables, and the lean group loop.
template <class Policy>
__global__ void __launch_bounds__(Policy::Shape::kThreads, 1)
    lattice_decode_lean_kernel(std::uint8_t* __restrict__ scratch, std::uint64_t descs_offset,
                               std::uint64_t items_offset, std::uint64_t status_offset,
                               std::uint64_t tile_status_offset) {
  constexpr int kPb = Policy::kProbBits;
  constexpr bool kBf16 = Policy::kBf16Store;
  extern __shared__ uint4 dynamic_smem[];
  const WorkItem item = reinterpret_cast<const WorkItem*>(scratch + items_offset)[blockIdx.x];
  // Warp w's first tile is tile_begin + w, started before the tables have arrived; later ones come from the counter.
  const std::uint32_t warps = blockDim.x / 32;
  const BlockSetup b = block_setup(dynamic_smem, scratch, descs_offset, item, warps, true, warps, true);
  const TensorDesc d = *b.gdesc;
  auto* status = reinterpret_cast<DecodeStatus*>(scratch + status_offset);
  auto* tile_status = scratch + tile_status_offset;
  const std::uint32_t ring_s = b.ring0 + (threadIdx.x / 32) * kRingBytes;
  // One call site (the loop body is inlined once); the shuffle tells ptxas the tile is the same in every lane, so the
  // votes need no divergence path.
  std::uint32_t tile = __shfl_sync(kFull, item.tile_begin + threadIdx.x / 32, 0);
  for (bool first = true;; first = false) {
    if (tile >= item.tile_end) {
      if (first) join_block_after_tables();
      break;
    }
    decode_tile_lean<kPb, kBf16>(d, item.tensor, tile, b.smem0, ring_s, status, tile_status, first);
    tile = next_block_tile(b.next_tile);
  }
}

}  // namespace epk::cuda::detail
