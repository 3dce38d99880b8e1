// Reads one quantized nn.Linear of a safetensors checkpoint into the logical tensor, whatever its format: the glue
// `epk import` needs between a checkpoint reader (which maps names to tensor bytes) and the layout readers here.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "codec/layouts/quant_config.h"
#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts {

// Returns the view of a checkpoint tensor by full name, or nullopt when absent.
using TensorLookup = std::function<std::optional<TensorView>(std::string_view name)>;

// The layer prefixes ("model.layers.0.mlp.down_proj") of the quantized linears among `names`, in input order:
// names ending in ".qweight" (GPTQ, AWQ) or ".weight_packed" (compressed-tensors), and with config.gptq_marlin
// also ".B" (the Marlin-format checkpoints' weight).
std::vector<std::string> quantized_linear_prefixes(const std::vector<std::string>& names);
std::vector<std::string> quantized_linear_prefixes(const std::vector<std::string>& names, const QuantConfig& config);

// GPTQ: prefix.{qweight, qzeros, scales, g_idx?}; GPTQ in Marlin format: prefix.{B, s} (or qweight, scales), K taken
// from B's rows * 16; AWQ: prefix.{qweight, qzeros, scales} (GEMM or GEMV by config.awq_version);
// compressed-tensors: prefix.{weight_packed, weight_shape, weight_scale, weight_zero_point?, weight_g_idx?}.
// bitsandbytes weights are not integer codes: kUnsupported (use bnb::read_state / bnb::dequantize_f32).
// A missing tensor is kBadInput naming it.
Result<QuantTensor> read_quantized_linear(const TensorLookup& lookup, std::string_view prefix,
                                          const QuantConfig& config);

}  // namespace epk::layouts
