// GPU dequantization and repacking of `intq` tensors (docs/FORMAT.md 11, kind "int") from their stored logical form:
// the packed LSB-first code stream, float32 scales, packed zeros and g_idx/perm, all already in device memory.
//   dequantize_dense: the nn.Linear weight [cols, rows] (perm undone) in bf16/fp16, one rounding (RNE) of the exact
//                     float32 product scale * (code - zero): bit-identical to intq::dequantize_intq.
//   repack_gptq_qweight / repack_awq_qweight / repack_marlin_qweight: the code words of those layouts, bit-identical
//                     to write_gptq / write_awq / write_marlin's "qweight" for the same (already padded) tensor.
//   repack_gptq_qzeros_v1/_v2, repack_awq_qzeros, convert_scales and repack_marlin_scales: the same for the
//                     per-group tensors; gptq_g_idx and marlin_g_idx_perm: the act-order index tensors, with
//                     invert_perm / group_order computing the row maps on the device (act-order never needs a host
//                     round trip).
// Host-only header (no CUDA headers): the daemon and the tools include it with the host compiler. No call allocates
// device memory except the one-time upload (per device) of the Marlin permutation tables; scratch is the caller's.
#pragma once

#include <cstdint>

#include "codec/common/result.h"
#include "codec/cuda/decode/decode.h"  // epk::cuda::Stream

namespace epk::cuda::intq {

// Bits of the device flag words some calls set (the kernels use the same values, intq_kernels.cuh).
inline constexpr std::uint32_t kZeroPointZero = 1;       // a GPTQ v1 zero point of 0 was met
inline constexpr std::uint32_t kPaddingSortsInside = 2;  // group_order moved a padding row into the logical rows

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

// dst: [padded_rows * bits / 32, padded_cols] words. Needs padded_rows * bits % 32 == 0. A tensor with a perm is
// written in feature order, as write_gptq does: pass inv_perm (invert_perm's output); without a perm pass nullptr.
Status repack_gptq_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream,
                           const std::int32_t* inv_perm = nullptr);
// GPTQ "g_idx" [padded_rows] in feature order: g_idx (or k / group_size) gathered through inv_perm (nullable).
Status gptq_g_idx(const DeviceIntq& t, const std::int32_t* inv_perm, std::int32_t* dst, Stream stream);
// Act-order scratch, [padded_rows] i32 each, in device memory the caller owns:
//   invert_perm: inv[perm[k]] = k (t.perm required)
//   group_order: the stable argsort of g_idx (sort_groups' row order); sets kPaddingSortsInside in *flags
//                (nullable) when a padding row would sort into the logical rows, which the CPU refuses
Status invert_perm(const DeviceIntq& t, std::int32_t* inv, Stream stream);
Status group_order(const DeviceIntq& t, std::int32_t* order, std::uint32_t* flags, Stream stream);
// dst: [padded_rows, padded_cols / 8] words. Needs bits == 4, padded_cols % 8 == 0, static groups and no perm.
Status repack_awq_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream);
// dst: [padded_rows / 16, padded_cols * 16 * bits / 32] words. Needs bits 4 or 8, padded_rows % 16 == 0,
// padded_cols % 64 == 0. Act-order (g_idx or perm set): pass order (group_order's output) and the rows are taken
// sorted by group, as write_marlin does; the layout's g_idx and perm parts then come from marlin_g_idx_perm.
Status repack_marlin_qweight(const DeviceIntq& t, std::uint32_t* dst, Stream stream,
                             const std::int32_t* order = nullptr);
// Marlin's act-order parts, [padded_rows] i32 each: g_idx[j] = g_idx[order[j]], perm[j] = perm[order[j]] (or
// order[j] without a perm).
Status marlin_g_idx_perm(const DeviceIntq& t, const std::int32_t* order, std::int32_t* g_idx_out,
                         std::int32_t* perm_out, Stream stream);

// GPTQ v2 "qzeros": [num_groups, padded_cols * bits / 32] words. Needs padded_cols * bits % 32 == 0.
Status repack_gptq_qzeros_v2(const DeviceIntq& t, std::uint32_t* dst, Stream stream);
// GPTQ v1 "qzeros" (AutoGPTQ stores z - 1, masked): as v2 otherwise. v1 cannot hold a zero point of 0; such a tensor
// sets bit kZeroPointZero (1) of *zero_flag (device memory, nullable), and the caller must refuse the result after
// the stream has run (write_gptq refuses it on the CPU).
Status repack_gptq_qzeros_v1(const DeviceIntq& t, std::uint32_t* dst, std::uint32_t* zero_flag, Stream stream);
// AWQ "qzeros": [num_groups, padded_cols / 8] words (4-bit, the qweight column order).
Status repack_awq_qzeros(const DeviceIntq& t, std::uint32_t* dst, Stream stream);
// GPTQ/AWQ "scales": [num_groups, padded_cols] in bf16/fp16 (exact when they came from that dtype).
Status convert_scales(const DeviceIntq& t, DenseType type, void* dst, Stream stream);
// Marlin "scales": blocks of 64 (grouped: group_size < padded_rows) or 32 (per-channel) through Marlin's scale
// permutation. Needs padded_cols % 64 == 0.
Status repack_marlin_scales(const DeviceIntq& t, DenseType type, void* dst, Stream stream);

}  // namespace epk::cuda::intq
