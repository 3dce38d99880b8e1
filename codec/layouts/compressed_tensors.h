// compressed-tensors "pack-quantized" (llm-compressor), read into and written from the logical QuantTensor.
//   weight_packed     I32 [N, W]: codes packed along K in nn.Linear order ([N, K]), LSB-first
//   weight_shape      I32/I64 [2] = (N, K), the logical shape (K need not fill the last word)
//   weight_scale      F16/BF16/F32 [N, G_n]
//   weight_zero_point I32 [Wz, G_n], asymmetric only: zero points packed along N
//   weight_g_idx      I32 [K], optional
// Stored values are the signed quantized values plus 2^(b-1), which is exactly the logical unsigned code (and the
// logical zero is the signed zero point plus 2^(b-1); symmetric: 2^(b-1)). W = (q - zp) * s.
// Two packings exist for widths that do not divide 32, chosen by the library version:
//   kDense (compressed-tensors 0.20, the installed reference): one bitstream, values straddle words,
//     W = ceil(K*b/32);
//   kPerWord (earlier releases; the only source for it is the project's shared layout notes, outside this
//     repository, and it is not checked against an old release): 32/b whole values per word, the top 32 % b bits
//     unused, W = ceil(K / (32/b)).
// For 2, 4 and 8 bits the two are identical. Derived and tested: symmetric 4-bit weight_packed.T == GPTQ qweight.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts {

enum class CtPacking { kDense, kPerWord };

struct CtViews {
  TensorView weight_packed;
  TensorView weight_shape;
  TensorView weight_scale;
  std::optional<TensorView> weight_zero_point;  // absent: symmetric
  std::optional<TensorView> weight_g_idx;
};

// group_size -1 (channel strategy) means one group over K.
Result<QuantTensor> read_compressed_tensors(const CtViews& v, int bits, std::int64_t group_size, CtPacking packing);

// Tensors "weight_packed", "weight_shape" (I64, as torch.tensor(shape) saves), "weight_scale", "weight_zero_point"
// (only when not symmetric) and "weight_g_idx" (only for scattered groups). Logical sizes are written; codes beyond
// them are dropped. A row-permuted tensor is restored to feature order first.
Result<std::vector<Tensor>> write_compressed_tensors(const QuantTensor& t, CtPacking packing);

}  // namespace epk::layouts
