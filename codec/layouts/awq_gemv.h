// AutoAWQ GEMV layout (WQLinear_GEMV; 4-bit only), read into and written from the logical QuantTensor.
//   qweight I32 [N, K/8]: packed along K in natural order: slot i (bits 4i) of word (n, c) holds code (8c + i, n)
//   qzeros  I32 [N, W]: zeros [N, K/G] packed along the groups the same way; fields past K/G are 0
//   scales  F16 [N, 8W]: scales [N, K/G], then zero padding
// W = awq_gemv_zeros_width(K, G) = ceil(ceil(K/G) / 8 / m) * m with m = 1 for G >= 128, 2 for G = 64, 4 for G = 32
// (AutoAWQ's calculate_zeros_width; other group sizes below 128 are not a GEMV layout). K % G == 0, N % 8 == 0 and
// K % 8 == 0; groups contiguous (k / G): no g_idx. w = (q - z) * s as in the GEMM layout, so GEMM <-> GEMV is exact.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts {

// 0 when group_size is below 128 and neither 64 nor 32, or when k or group_size is not positive.
std::int64_t awq_gemv_zeros_width(std::int64_t k, std::int64_t group_size);

struct AwqGemvViews {
  TensorView qweight;
  TensorView qzeros;
  TensorView scales;
};

// group_size -1 (or 0) means one group over K. The padding fields of qzeros and columns of scales are not read.
Result<QuantTensor> read_awq_gemv(const AwqGemvViews& v, std::int64_t group_size);

// Tensors "qweight", "qzeros", "scales" (scale dtype of t). Needs 4-bit codes, static groups (sort_groups first),
// padded_rows % group_size == 0, padded_rows % 8 == 0, padded_cols % 8 == 0 and a GEMV group size. As with write_awq,
// t.perm is not stored: the layer must gather its activations through it (write_layout reports it).
Result<std::vector<Tensor>> write_awq_gemv(const QuantTensor& t);

}  // namespace epk::layouts
