// The warp-specialised lean kernel (DecodeOptions::warp_specialised): the lean loop split in two kinds of warps.
// Decode warps (one tile each, as in the lean kernel) run only the symbol chain (rANS state, table lookup,
// renormalisation, word ring) and post each group's eight packed entries and coset per lane to one of two slots in
// shared memory; reconstruction warps (no state chain) take the slots, place the vectors, apply the row scale,
// convert and store them. Same output bit for bit as the lean loop (the same lean_bf16_vector and
// lean_store_general); its plain reference is codec/rans's decoder, which the tests in tests/codec/cuda compare it
// against.
//
// Why: the lean kernel is bound by the state chain (about 175 cycles per symbol step even alone, two shared-memory
// round trips; docs/NOTES.md) and by issue, with only ~5 chains per scheduler (the stream's tile count). A warp
// issues in order, so in the lean loop a group's placement and store (~14 instructions per symbol step) sat between
// two groups' chains. Split off,
// the chains issue at their own latency and the reconstruction warps' work fills the slots they leave idle.
// Measured (H200, docs/NOTES.md runs 8 and 9): bit-exact everywhere, but the hand-off and the un-stepped placement
// cost 23% more warp instructions than the lean loop while issue efficiency rose only 62.5% -> 67.6%, so 10240x3840
// at 4 bpp takes 84.8-87.2 us against the lean loop's 79.2-80.0 (2 bpp 122.8 vs 115.9); with few tiles per block
// (4096x4096, 9 decode warps) it is 3% faster (68.4 vs 70.6 us). Off by default for that reason.
//
// Hand-off: per decode warp two slots, each with a "full" mbarrier (32 arrivals: every decode lane after its
// stores) and an "empty" one (32 arrivals: every reconstruction lane after its loads); the arrive releases and the
// wait acquires at CTA scope, so no other fence is needed. Reconstruction warp r serves decode warps r, r + R,
// r + 2R (at most 3) in strict turn; a decode warp ends with a slot whose tile is kWsEndOfWork. No warp waits on a
// barrier that its own progress must complete, and a decode warp only ever waits for its own slots, which its
// reconstruction warp frees in order, so the hand-off cannot deadlock.
#pragma once

#include <cstdint>

#include "codec/cuda/decode_lean.cuh"

namespace epk::cuda::detail {

// Dynamic shared memory: the lean kernel's (tables, rings of the decode warps, descriptor, counter), then two slots
// per decode warp, then their mbarriers. The work item's pad field holds the number of decode warps; the rest of the
// block's warps reconstruct.
template <int kPb, bool kBf16>
__global__ void __launch_bounds__(kMaxWarpsPerBlock * 32, 1)
    lattice_decode_ws_kernel(std::uint8_t* __restrict__ scratch, std::uint64_t descs_offset,
                             std::uint64_t items_offset, std::uint64_t status_offset,
                             std::uint64_t tile_status_offset) {
  extern __shared__ uint4 dynamic_smem[];
  const WorkItem item = reinterpret_cast<const WorkItem*>(scratch + items_offset)[blockIdx.x];
  const std::uint32_t decode_warps = item.pad;
  const std::uint32_t recon_warps = blockDim.x / 32 - decode_warps;
  const BlockSetup b = block_setup(dynamic_smem, scratch, descs_offset, item, decode_warps, true);
  const std::uint32_t slots0 = b.after;
  const std::uint32_t mbar0 = slots0 + decode_warps * 2 * kWsSlotBytes;
  // The barriers are set up after the table copy has completed: racecheck (H200 run 1) reported the table copy and
  // mbarrier.init as racing although their addresses do not overlap; ordering them costs one barrier per block.
  __syncthreads();
  if (threadIdx.x < decode_warps * 4) mbar_init(mbar0 + threadIdx.x * 8, 32);
  __syncthreads();
  const TensorDesc d = *reinterpret_cast<const TensorDesc*>(b.desc_words);
  const std::uint32_t warp = threadIdx.x / 32;
  const std::uint32_t lane = threadIdx.x & 31;
  if (warp < decode_warps) {
    auto* status = reinterpret_cast<DecodeStatus*>(scratch + status_offset);
    auto* tile_status = scratch + tile_status_offset;
    const std::uint32_t ring_s = b.ring0 + warp * kRingBytes;
    WsSlots ws{slots0 + warp * 2 * kWsSlotBytes, mbar0 + warp * 32, 0};
    for (;;) {
      const std::uint32_t tile = next_block_tile(b.next_tile);
      if (tile >= item.tile_end) break;
      decode_tile_lean<kPb, kBf16, true>(d, item.tensor, tile, b.smem0, ring_s, status, tile_status, &ws);
    }
    const std::uint32_t none[8] = {};
    ws_post(ws, none, 0, kWsEndOfWork, 0, 0);
    return;
  }
  const std::uint32_t r = warp - decode_warps;
  std::uint32_t taken[kWsMaxServed] = {};
  std::uint32_t live = 0;
#pragma unroll
  for (int j = 0; j < kWsMaxServed; ++j) {
    if (r + j * recon_warps < decode_warps) live |= 1u << j;
  }
  while (live != 0) {
#pragma unroll
    for (int j = 0; j < kWsMaxServed; ++j) {
      if ((live >> j) & 1u) {
        const std::uint32_t w = r + j * recon_warps;
        const std::uint32_t s = taken[j] & 1u;
        const std::uint32_t slot = slots0 + (w * 2 + s) * kWsSlotBytes;
        const std::uint32_t full = mbar0 + w * 32 + s * 16;
        mbar_wait(full, (taken[j] >> 1) & 1u);
        ++taken[j];
        const uint4 meta = ld_shared_v4(slot + 1152);
        if (meta.x == kWsEndOfWork) {
          live &= ~(1u << j);  // the decode warp waits on nothing after its end slot
          continue;
        }
        const uint4 lo = ld_shared_v4(slot + lane * 16);
        const uint4 hi = ld_shared_v4(slot + 512 + lane * 16);
        std::uint32_t c;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(c) : "r"(slot + 1024 + lane * 4) : "memory");
        mbar_arrive(full + 8);
        const std::uint64_t vec = static_cast<std::uint64_t>(meta.x) * d.tile_vectors + meta.y + lane;
        const Placement pl = place_vector(d, vec, lane < meta.z);
        if (pl.store) {
          const std::uint32_t e[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
          if constexpr (kBf16) {
            *reinterpret_cast<uint4*>(bf16_vector_dst(d, pl.row, pl.col)) = lean_bf16_vector<kPb>(e, c, pl.scale);
          } else {
            lean_store_general<kPb>(d, e, c, pl.row, pl.col, pl.scale);
          }
        }
      }
    }
  }
}

}  // namespace epk::cuda::detail
