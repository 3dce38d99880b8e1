// Effective bits per weight: everything a layout stores for a weight matrix (codes, scales, zeros, group indices
// and permutations) divided by the logical number of weights, the figure `epk inspect` reports per format.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "codec/layouts/tensor.h"

namespace epk::layouts {

struct Footprint {
  std::uint64_t code_bytes = 0;
  std::uint64_t scale_bytes = 0;  // scales, absmax, GGUF block scales and mins
  std::uint64_t zero_bytes = 0;
  std::uint64_t index_bytes = 0;  // g_idx, perm, weight_shape, quant_state
  std::uint64_t weights = 0;      // logical K * N

  std::uint64_t total_bytes() const { return code_bytes + scale_bytes + zero_bytes + index_bytes; }
  double bits_per_weight() const { return weights ? 8.0 * static_cast<double>(total_bytes()) / weights : 0.0; }
};

// Classifies tensors by their layout names (qweight/weight_packed/weight: codes; scales/weight_scale/absmax/
// nested_*/quant_map: scales; qzeros/weight_zero_point: zeros; anything else: indices). Names may carry a prefix.
Footprint footprint_of(std::span<const Tensor> tensors, std::uint64_t logical_weights);

// A GGUF tensor of `n_elements` of ggml type `type`: block bytes split into codes and per-block metadata. Zero
// weights when the type is unknown.
Footprint gguf_footprint(std::uint32_t type, std::uint64_t n_elements);

}  // namespace epk::layouts
