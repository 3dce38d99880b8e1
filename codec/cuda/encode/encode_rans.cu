// rans::encode_fields' tile coder on the device: one warp a tile, lane k the tile's rANS lane k. Within a tile the
// words go to one stream in the CPU's order (groups of 32 vectors, fields 7..0 then the coset, lanes ascending
// within a step): a ballot and a prefix count give each emitting lane its place.
#include "codec/cuda/encode/encode_kernels.h"

namespace epk::cuda::enc {

namespace {

constexpr std::uint32_t kStateLow = 1u << 15;  // rans::kStateLow
constexpr int kWarpsPerBlock = 4;

__global__ void rans_tiles_kernel(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                                  std::uint32_t tile_vectors, std::uint32_t tiles, std::uint32_t prob_bits,
                                  DeviceTables tables, std::uint16_t* scratch, std::uint64_t capacity,
                                  std::uint32_t* words, std::uint32_t* states) {
  const std::uint32_t tile = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const unsigned lane = threadIdx.x & 31;
  if (tile >= tiles) return;
  const std::uint64_t begin = std::uint64_t(tile) * tile_vectors;
  const std::uint64_t end = begin + tile_vectors < n ? begin + tile_vectors : n;
  const int check_shift = 31 - int(prob_bits);
  const unsigned lower = (1u << lane) - 1u;
  std::uint16_t* out = scratch + std::uint64_t(tile) * capacity;
  std::uint32_t x = kStateLow;
  std::uint32_t count = 0;
  auto put = [&](bool active, int t, std::int32_t value) {
    bool emit = false;
    std::uint16_t word = 0;
    if (active) {
      const std::uint32_t sym = std::uint32_t(value - tables.sym_min[t]);
      const std::uint32_t f = tables.freq[tables.off[t] + sym];
      const std::uint32_t cum = tables.cdf[tables.off[t] + sym];
      std::uint32_t s = x;
      if (s >= (f << check_shift)) {
        emit = true;
        word = std::uint16_t(s & 0xffffu);
        s >>= 16;
      }
      x = ((s / f) << prob_bits) + (s % f) + cum;
    }
    const unsigned mask = __ballot_sync(0xffffffffu, emit);
    if (emit) out[count + __popc(mask & lower)] = word;
    count += __popc(mask);
  };
  for (std::uint64_t base = begin; base < end; base += 32) {
    const std::uint64_t v = base + lane;
    const bool active = v < end;
    int c = 0;
    int f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active) {
      c = coset[v];
      const int4* p = reinterpret_cast<const int4*>(fields + v * 8);
      const int4 a = p[0], b = p[1];
      f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
      f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    }
#pragma unroll
    for (int field = 7; field >= 0; --field) put(active, 1 + 2 * field + c, f[field]);
    put(active, 0, c);
  }
  states[std::uint64_t(tile) * 32 + lane] = x;
  if (lane == 0) words[tile] = count;
}

__global__ void pack_words_kernel(const std::uint16_t* scratch, std::uint64_t capacity, const std::uint32_t* offsets,
                                  std::uint16_t* payload) {
  const std::uint32_t tile = blockIdx.x;
  const std::uint32_t b = offsets[tile], e = offsets[tile + 1];
  const std::uint16_t* in = scratch + std::uint64_t(tile) * capacity;
  for (std::uint32_t i = threadIdx.x; i < e - b; i += blockDim.x) payload[b + i] = in[i];
}

}  // namespace

void launch_rans_tiles(const std::uint8_t* coset, const std::int32_t* fields, std::uint64_t n,
                       std::uint32_t tile_vectors, std::uint32_t tiles, std::uint32_t prob_bits, DeviceTables tables,
                       std::uint16_t* scratch, std::uint64_t capacity, std::uint32_t* words, std::uint32_t* states,
                       cudaStream_t stream) {
  const unsigned grid = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  rans_tiles_kernel<<<grid, kWarpsPerBlock * 32, 0, stream>>>(coset, fields, n, tile_vectors, tiles, prob_bits,
                                                              tables, scratch, capacity, words, states);
}

void launch_pack_words(const std::uint16_t* scratch, std::uint64_t capacity, std::uint32_t tiles,
                       const std::uint32_t* offsets, std::uint16_t* payload, cudaStream_t stream) {
  if (tiles == 0) return;
  pack_words_kernel<<<tiles, 256, 0, stream>>>(scratch, capacity, offsets, payload);
}

}  // namespace epk::cuda::enc
