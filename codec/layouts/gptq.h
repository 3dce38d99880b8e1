// GPTQ (AutoGPTQ / GPTQModel) layout, read into and written from the logical QuantTensor.
//   qweight I32 [K*b/32, N]: codes packed along K, one LSB-first bitstream per column (3-bit straddles words)
//   qzeros  I32 [G_n, ceil(N*b/32)]: zeros packed along N, same stream rule
//   scales  F16 [G_n, N] (BF16/F32 accepted on read)
//   g_idx   I32 [K], optional (absent: row k is in group k / G)
// Zero conventions: v1 ("gptq", AutoGPTQ) stores z - 1 and readers compute (stored + 1) & mask, as AutoGPTQ's own
// dequantization does; v2 ("gptq_v2", GPTQModel) stores z. v1 cannot represent z = 0 without the reader's mask (and
// kernels that skip the mask read 2^b), so write_gptq refuses z = 0 under v1: use v2 (docs/LAYOUTS.md 6.1).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts {

enum class GptqZeros { kV1, kV2 };

struct GptqViews {
  TensorView qweight;
  TensorView qzeros;
  TensorView scales;
  std::optional<TensorView> g_idx;
};

// bits in {2, 3, 4, 8}; group_size from quantize_config.json (-1: one group over all of K).
Result<QuantTensor> read_gptq(const GptqViews& v, int bits, std::int64_t group_size, GptqZeros zeros);

// Tensors "qweight", "qzeros", "scales" (scale_dtype of t) and "g_idx". A tensor whose rows were permuted (t.perm) is
// written back in original feature order, so GPTQ's g_idx carries the grouping and no activation permutation is
// needed; t.perm must then be a permutation of 0..padded_rows-1. Needs padded_rows*b and padded_cols*b multiples of
// 32 (pad_to first).
Result<std::vector<Tensor>> write_gptq(const QuantTensor& t, GptqZeros zeros);

// v1 -> v2 on packed qzeros words without unpacking (GPTQModel's trick): add 0x55555555 (2-bit), 0x11111111 (4-bit)
// or 0x01010101 (8-bit), i.e. +1 in every field. A field holding all ones (z = 0 under the v1 reader's mask) would
// carry into its neighbour, so such words are refused. 3-bit fields straddle words: use read_gptq + write_gptq.
Status gptq_v1_to_v2_words(std::span<std::uint32_t> qzeros_words, int bits);

}  // namespace epk::layouts
