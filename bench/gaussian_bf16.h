// Seeded N(0, 0.02) weights rounded to bf16, element by element from a counter hash (Box-Muller), for the GPU
// benchmarks that generate large tensors: gpu_encode_bench on the device, gpu_decode_bench on the host threads. An
// element depends only on (seed, index), so a tensor is the same whatever generates it in parallel (the host's and
// the device's sqrtf / logf / cosf may differ in the last place).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define EPK_BENCH_HOST_DEVICE __host__ __device__
#else
#define EPK_BENCH_HOST_DEVICE
#endif

namespace epk::bench {

EPK_BENCH_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Element i of the tensor of `seed`, as bf16 bits (float32 rounded to nearest even).
EPK_BENCH_HOST_DEVICE inline std::uint16_t gaussian_bf16_at(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i);
  const float u1 = (float((h >> 40) & 0xffffff) + 1.0f) / 16777217.0f;
  const float u2 = float((h >> 16) & 0xffffff) / 16777216.0f;
  const float g = sqrtf(-2.0f * logf(u1)) * cosf(6.28318531f * u2) * 0.02f;
  std::uint32_t bits;
  __builtin_memcpy(&bits, &g, sizeof bits);
  return std::uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace epk::bench
