// GPU dequantization and repacking of `intq` tensors (docs/FORMAT.md 11, kind "int") from their stored logical form:
// the packed LSB-first code stream, float32 scales, packed zeros and g_idx/perm, all already in device memory.
//   dequantize_dense: the nn.Linear weight [cols, rows] (perm undone) in bf16/fp16, one rounding (RNE) of the exact
//                     float32 product scale * (code - zero): bit-identical to intq::dequantize_intq.
//   repack_gptq_qweight / repack_awq_qweight / repack_marlin_qweight: the code words of those layouts, bit-identical
//                     to write_gptq / write_awq / write_marlin's "qweight" for the same (already padded) tensor.
//   repack_gptq_qzeros (v2 convention), repack_awq_qzeros, convert_scales and repack_marlin_scales: the same for the
//                     per-group tensors. GPTQ v1 qzeros (z - 1) and g_idx/perm tensors are left to the CPU writers.
// Host-only header (no CUDA headers): the daemon and the tools include it with the host compiler. No call allocates
// device memory except the one-time upload of the Marlin permutation table.
#pragma once

#include <cstdint>

#include "codec/common/result.h"
#include "codec/cuda/decode.h"  // epk::cuda::Stream

namespace epk::cuda::intq {

struct DeviceIntq {
  const std::uint32_t* codes = nullptr;  // packed_words(padded_rows * padded_cols, bits) words
  const float* scales = nullptr;         // [num_groups, padded_cols]
  const std::uint32_t* zeros = nullptr;  // packed zeros [num_groups, padded_cols], or nullptr: symmetric 2^(bits-1)
  const std::int32_t* g_idx = nullptr;   // [padded_rows], or nullptr: k / group_size
  const std::int32_t* perm = nullptr;    // [padded_rows], or nullptr: identity
  int bits = 4;
  std::int64_t rows = 0, cols = 0, padded_rows = 0, padded_cols = 0, group_size = 1, num_groups = 0;
};

enum class DenseType { kBf16, kFp16 };

// dst: rows * cols elements of 2 bytes, [cols, rows] row-major.
Status dequantize_dense(const DeviceIntq& t, DenseType type, void* dst, Stream stream);

// dst: [padded_rows * bits / 32, padded_cols] words. Needs padded_rows * bits % 32 == 0 and perm == nullptr (the CPU
// writer restores feature order first; do that before uploading).
Status repack_gptq_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream);
// dst: [padded_rows, padded_cols / 8] words. Needs bits == 4, padded_cols % 8 == 0, static groups and no perm.
Status repack_awq_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream);
// dst: [padded_rows / 16, padded_cols * 16 * bits / 32] words. Needs bits 4 or 8, padded_rows % 16 == 0,
// padded_cols % 64 == 0, static groups and no perm (sort_groups on the host first).
Status repack_marlin_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream);

// GPTQ v2 "qzeros": [num_groups, padded_cols * bits / 32] words. Needs padded_cols * bits % 32 == 0.
Status repack_gptq_qzeros_v2(const DeviceIntq& t, std::uint32_t* dst, Stream stream);
// AWQ "qzeros": [num_groups, padded_cols / 8] words (4-bit, the qweight column order).
Status repack_awq_qzeros(const DeviceIntq& t, std::uint32_t* dst, Stream stream);
// GPTQ/AWQ "scales": [num_groups, padded_cols] in bf16/fp16 (exact when they came from that dtype).
Status convert_scales(const DeviceIntq& t, DenseType type, void* dst, Stream stream);
// Marlin "scales": blocks of 64 (grouped: group_size < padded_rows) or 32 (per-channel) through Marlin's scale
// permutation. Needs padded_cols % 64 == 0.
Status repack_marlin_scales(const DeviceIntq& t, DenseType type, void* dst, Stream stream);

}  // namespace epk::cuda::intq
