// The device encoder's source weights as float32, as codec/rate's load_weight reads them on the host (F32, BF16 and
// F16 sources: encode_kernels.h's Source).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "codec/cuda/encode/encode_kernels.h"

namespace epk::cuda::enc {

// One weight from its bits (the low 16 of `bits` for BF16 and F16).
template <Source S>
__device__ __forceinline__ float weight_of(std::uint32_t bits) {
  if constexpr (S == Source::kF32) {
    return __uint_as_float(bits);
  } else if constexpr (S == Source::kBF16) {
    return __uint_as_float((bits & 0xffffu) << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
  }
}

// Weight i of the source.
template <Source S>
__device__ __forceinline__ float load_weight(const void* src, std::uint64_t i) {
  if constexpr (S == Source::kF32) {
    return static_cast<const float*>(src)[i];
  } else {
    return weight_of<S>(static_cast<const std::uint16_t*>(src)[i]);
  }
}

template <Source S>
inline constexpr int kWeightBytes = S == Source::kF32 ? 4 : 2;

}  // namespace epk::cuda::enc

// KERNEL<Source> launched for the runtime dtype.
#define EPK_ENC_DISPATCH(dtype, KERNEL, GRID, BLOCK, SMEM, STREAM, ...)                    \
  switch (dtype) {                                                                         \
    case ::epk::cuda::enc::Source::kF32:                                                   \
      KERNEL<::epk::cuda::enc::Source::kF32><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__);  \
      break;                                                                               \
    case ::epk::cuda::enc::Source::kBF16:                                                  \
      KERNEL<::epk::cuda::enc::Source::kBF16><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__); \
      break;                                                                               \
    case ::epk::cuda::enc::Source::kF16:                                                   \
      KERNEL<::epk::cuda::enc::Source::kF16><<<GRID, BLOCK, SMEM, STREAM>>>(__VA_ARGS__);  \
      break;                                                                               \
  }
