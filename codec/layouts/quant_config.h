// The quantization settings of a checkpoint, from quantize_config.json (AutoGPTQ / GPTQModel) or the
// "quantization_config" object of config.json (transformers: gptq, awq, compressed-tensors, bitsandbytes).
// `epk import` picks the reader from `format`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "codec/common/result.h"
#include "codec/layouts/gptq.h"

namespace epk::layouts {

enum class QuantFormat { kGptq, kAwq, kCompressedTensors, kBitsandbytes4bit };

struct QuantConfig {
  QuantFormat format = QuantFormat::kGptq;
  int bits = 4;
  std::int64_t group_size = -1;  // -1: one group over K
  bool symmetric = true;
  bool desc_act = false;          // GPTQ act-order (g_idx present and scattered)
  GptqZeros gptq_zeros = GptqZeros::kV1;  // checkpoint_format "gptq" (v1) or "gptq_v2"
  // checkpoint_format "marlin" (AutoGPTQ >= 0.8, GPTQModel) or is_marlin_format true (AutoGPTQ <= 0.7.1): the
  // IST-DASLab Marlin layout vLLM's MarlinConfig loads, tensors B (qweight) and s (scales) and an ignored workspace;
  // 4-bit, symmetric, no act-order.
  bool gptq_marlin = false;
  std::string awq_version;        // "gemm" or "gemv" (readable here); others (gemv_fast, marlin, ...) are refused
  std::string bnb_quant_type;     // "nf4" / "fp4"
};

// Accepts a quantize_config.json document or a config.json carrying "quantization_config". Unknown methods and
// layouts this module cannot read (GPTQ checkpoint_format "bitblas", AWQ "gemv_fast", compressed-tensors formats other
// than pack-quantized, bitsandbytes 8-bit) are kUnsupported; malformed fields are kBadInput naming `label`.
Result<QuantConfig> parse_quant_config(std::string_view json_text, std::string_view label);

}  // namespace epk::layouts
