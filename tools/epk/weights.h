// Source weights as float32 and error figures, shared by epk compress and epk verify.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/common/result.h"
#include "codec/safetensors/reader.h"

namespace epk::cli {

// The tensor's elements as float32 (F32, BF16, F16, F8_E4M3, F8_E5M2, I8); kUnsupported naming it otherwise.
Result<std::vector<float>> source_f32(const safetensors::TensorView& t);

// sqrt(sum (x - ref)^2 / sum ref^2); 0 when both are all zero, infinity when only ref is.
double relative_l2(std::span<const float> x, std::span<const float> ref);

// Sum of squares of the tensor's elements (for the budget allocation), streamed in chunks.
Result<double> energy(const safetensors::TensorView& t);

// Elapsed seconds as "1:05" or "1:02:03".
std::string clock_string(double seconds);

}  // namespace epk::cli
