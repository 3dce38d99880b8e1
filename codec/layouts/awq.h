// AutoAWQ GEMM layout (4-bit only), read into and written from the logical QuantTensor.
//   qweight I32 [K, N/8]: packed along N; slot i (bits 4i) of word c holds column 8c + kAwqOrder[i]
//   qzeros  I32 [K/G, N/8]: same packing, zeros unshifted
//   scales  F16 [K/G, N]
// No g_idx: groups are contiguous (k / G), so K % G == 0 and N % 8 == 0. w = (q - z) * s.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts {

// Slot -> column within a group of 8 (the packer's order); readers undo it with its inverse {0,4,1,5,2,6,3,7}.
inline constexpr std::array<int, 8> kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};

struct AwqViews {
  TensorView qweight;
  TensorView qzeros;
  TensorView scales;
};

Result<QuantTensor> read_awq(const AwqViews& v, std::int64_t group_size);

// Tensors "qweight", "qzeros", "scales". AWQ has no g_idx: a tensor with scattered groups (act-order) is refused;
// convert it with sort_groups first and permute the activations by the resulting perm (write_layout does both).
// Needs 4-bit codes, padded_rows % group_size == 0 and padded_cols % 8 == 0.
Result<std::vector<Tensor>> write_awq(const QuantTensor& t);

}  // namespace epk::layouts
