// Integer layouts from formats whose values are not on an integer grid (NF4/FP4 levels, K-quants with float mins,
// Q4_1): the only way in is requantization, which adds error. The error is measured and returned with the tensor;
// callers report it and never call the conversion lossless. GGUF Q4_0 and Q8_0 are integer grids already and convert
// exactly (gguf_to_quant_tensor).
#pragma once

#include <cstdint>
#include <span>

#include "codec/common/result.h"
#include "codec/layouts/gguf.h"
#include "codec/layouts/quant_tensor.h"

namespace epk::layouts {

struct RequantError {
  double max_abs = 0;  // max |w - w'|
  double rms = 0;      // sqrt(mean (w - w')^2)
  double rel_rms = 0;  // rms / sqrt(mean w^2)
  bool exact() const { return max_abs == 0; }
};

struct Requantized {
  QuantTensor tensor;
  RequantError error;
};

// Round-to-nearest quantization of w [rows, cols] (row-major, the [K, N] orientation) into `bits`-bit codes with
// fp16 scales per (group of `group_size` rows, column); asymmetric zeros or the symmetric 2^(bits-1). The error is
// measured against the dequantized result.
Result<Requantized> requantize_rtn(std::span<const float> w, std::int64_t rows, std::int64_t cols, int bits,
                                   std::int64_t group_size, bool symmetric);

// A 2-D GGUF Q4_0 or Q8_0 tensor (ne = [K, N]) as the logical tensor, exactly: group 32 along K, the block's f16 d
// as the scale, zero 8 (Q4_0, 4-bit) or 128 (Q8_0, stored int8 + 128, 8-bit). Other types: kUnsupported (requantize).
Result<QuantTensor> gguf_to_quant_tensor(const gguf::TensorInfo& info, std::span<const std::uint8_t> bytes);

}  // namespace epk::layouts
