// bitsandbytes 4-bit (NF4 / FP4) weights with optional double quantization, as serialized by
// QuantState.as_dict(packed=True) under <prefix>.weight.:
//   weight            U8 [(numel+1)/2, 1]: the row-major weight flattened; element 2i in the HIGH nibble of byte i,
//                     element 2i+1 in the LOW nibble (the opposite of GGUF, docs/LAYOUTS.md 6.5)
//   absmax            F32 [blocks], or U8 [blocks] when double-quantized
//   quant_map         F32 [16]: the code table (NF4 or FP4 levels)
//   nested_absmax     F32 [ceil(blocks/256)], nested_quant_map F32 [256] (double quantization only)
//   quant_state.bitsandbytes__nf4 / __fp4  U8: UTF-8 JSON {quant_type, blocksize, dtype, shape, nested_blocksize,
//                     nested_dtype, nested_offset}
// Blocks run over the flat index (they cross rows). y = quant_map[nibble] * absmax[i / blocksize] in float32; with
// double quantization absmax[b] = nested_quant_map[u8[b]] * nested_absmax[b / nested_blocksize] + nested_offset, each
// operation rounded to float32 in that order, which is what bitsandbytes' own dequantize_4bit computes. The result is
// then rounded to the stored dtype (bf16/f16) by round-to-nearest-even, as torch's .to() does. FP4 code 8 gives +0.0
// (bitsandbytes 0.50.2's scalar CPU kernel gives -0.0 there, its vectorised kernel and Python fallback +0.0).
// NF4 levels are not uniform: converting to an integer layout needs requantization and is never lossless.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts::bnb {

enum class QuantType { kNf4, kFp4 };

// bitsandbytes' tables (used when a checkpoint carries no quant_map).
extern const std::array<float, 16> kNf4Levels;
extern const std::array<float, 16> kFp4Levels;

struct Views {
  TensorView weight;
  TensorView absmax;
  std::optional<TensorView> quant_map;
  std::optional<TensorView> nested_absmax;
  std::optional<TensorView> nested_quant_map;
  TensorView quant_state;  // the U8 JSON tensor
};

struct State {
  QuantType type = QuantType::kNf4;
  std::int64_t blocksize = 64;
  std::vector<std::int64_t> shape;
  DType dtype = DType::kBF16;       // the dtype dequantize_4bit returns
  std::array<float, 16> code{};
  std::vector<float> absmax;        // per block, after undoing double quantization
  bool double_quant = false;
  std::int64_t numel() const;
};

// Parses the JSON and resolves double quantization; checks every size against the shape and blocksize.
Result<State> read_state(const Views& v);

// The weight as float32, row-major in `shape` (before the final dtype rounding).
Result<std::vector<float>> dequantize_f32(const TensorView& weight, const State& s);
// Rounded to state.dtype: bf16 or f16 bits (RNE); for F32 use dequantize_f32.
Result<std::vector<std::uint16_t>> dequantize_16(const TensorView& weight, const State& s);

}  // namespace epk::layouts::bnb
