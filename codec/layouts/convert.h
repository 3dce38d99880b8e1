// Conversions between integer layouts, always through the logical QuantTensor (never by reinterpreting words): the
// entry points `epk convert --to gptq|gptq-v2|awq|marlin|ct` and the served layouts build on.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts {

enum class Layout { kGptqV1, kGptqV2, kAwq, kMarlin, kCompressedTensors, kAwqGemv };

// "gptq", "gptq-v2", "awq", "marlin", "ct", "awq-gemv".
std::optional<Layout> layout_from_name(std::string_view name);
std::string_view layout_name(Layout l);

struct Converted {
  std::vector<Tensor> tensors;             // suffix-named ("qweight", ...), for the caller to prefix
  std::vector<std::int32_t> activation_perm;  // empty: identity. Otherwise the layer must compute x[activation_perm]
                                              // before the matmul (act-order into a layout without g_idx)
  std::int64_t rows = 0, cols = 0;         // logical K, N (slice outputs to cols when the layout padded N)
  std::int64_t padded_rows = 0, padded_cols = 0;
};

// Pads to the target's multiples, sorts scattered groups for layouts without g_idx (AWQ GEMM and GEMV; Marlin stores
// its own g_idx/perm tensors, so activation_perm stays empty there), and writes. Fails, naming the reason, where the target
// cannot hold the tensor exactly (AWQ: not 4-bit; Marlin: asymmetric or not 4/8-bit; GPTQ v1: a zero of 0).
Result<Converted> write_layout(const QuantTensor& t, Layout target);

// Row and column multiples each layout needs (pad_to arguments).
void layout_alignment(Layout target, const QuantTensor& t, std::int64_t* row_multiple, std::int64_t* col_multiple);

}  // namespace epk::layouts
