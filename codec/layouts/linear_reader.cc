#include "codec/layouts/linear_reader.h"

#include "codec/layouts/awq.h"
#include "codec/layouts/awq_gemv.h"
#include "codec/layouts/compressed_tensors.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/marlin.h"

namespace epk::layouts {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Result<TensorView> need(const TensorLookup& lookup, std::string_view prefix, std::string_view suffix) {
  const std::string name = std::string(prefix) + "." + std::string(suffix);
  auto v = lookup(name);
  if (!v) return make_error(ErrorCode::kBadInput, "checkpoint: tensor '" + name + "' is missing");
  return *v;
}

std::optional<TensorView> maybe(const TensorLookup& lookup, std::string_view prefix, std::string_view suffix) {
  return lookup(std::string(prefix) + "." + std::string(suffix));
}

}  // namespace

std::vector<std::string> quantized_linear_prefixes(const std::vector<std::string>& names) {
  return quantized_linear_prefixes(names, QuantConfig{});
}

std::vector<std::string> quantized_linear_prefixes(const std::vector<std::string>& names, const QuantConfig& config) {
  std::vector<std::string> out;
  const bool marlin = config.format == QuantFormat::kGptq && config.gptq_marlin;
  for (const auto& n : names) {
    for (std::string_view suffix : {std::string_view(".qweight"), std::string_view(".weight_packed"),
                                    std::string_view(".B")}) {
      if (suffix == ".B" && !marlin) continue;
      if (ends_with(n, suffix)) out.push_back(n.substr(0, n.size() - suffix.size()));
    }
  }
  return out;
}

Result<QuantTensor> read_quantized_linear(const TensorLookup& lookup, std::string_view prefix,
                                          const QuantConfig& config) {
  switch (config.format) {
    case QuantFormat::kGptq: {
      if (config.gptq_marlin) {
        const bool named_b = lookup(std::string(prefix) + ".B").has_value();
        EPK_TRY_ASSIGN(TensorView b, need(lookup, prefix, named_b ? "B" : "qweight"));
        EPK_TRY_ASSIGN(TensorView s, need(lookup, prefix, named_b ? "s" : "scales"));
        if (b.shape.size() != 2 || b.shape[0] <= 0 || b.shape[0] > (std::int64_t{1} << 30)) {
          return make_error(ErrorCode::kBadInput, "checkpoint: tensor '" + std::string(b.name) +
                                                      "': not a 2-D Marlin weight [K/16, N*2]");
        }
        return read_marlin(MarlinViews{b, s, std::nullopt, std::nullopt}, 4, b.shape[0] * 16, config.group_size);
      }
      EPK_TRY_ASSIGN(TensorView qweight, need(lookup, prefix, "qweight"));
      EPK_TRY_ASSIGN(TensorView qzeros, need(lookup, prefix, "qzeros"));
      EPK_TRY_ASSIGN(TensorView scales, need(lookup, prefix, "scales"));
      return read_gptq(GptqViews{qweight, qzeros, scales, maybe(lookup, prefix, "g_idx")}, config.bits,
                       config.group_size, config.gptq_zeros);
    }
    case QuantFormat::kAwq: {
      EPK_TRY_ASSIGN(TensorView qweight, need(lookup, prefix, "qweight"));
      EPK_TRY_ASSIGN(TensorView qzeros, need(lookup, prefix, "qzeros"));
      EPK_TRY_ASSIGN(TensorView scales, need(lookup, prefix, "scales"));
      if (config.awq_version == "gemv") return read_awq_gemv(AwqGemvViews{qweight, qzeros, scales}, config.group_size);
      return read_awq(AwqViews{qweight, qzeros, scales}, config.group_size);
    }
    case QuantFormat::kCompressedTensors: {
      EPK_TRY_ASSIGN(TensorView packed, need(lookup, prefix, "weight_packed"));
      EPK_TRY_ASSIGN(TensorView shape, need(lookup, prefix, "weight_shape"));
      EPK_TRY_ASSIGN(TensorView scale, need(lookup, prefix, "weight_scale"));
      auto zp = maybe(lookup, prefix, "weight_zero_point");
      if (!config.symmetric && !zp) {
        return make_error(ErrorCode::kBadInput,
                          "checkpoint: tensor '" + std::string(prefix) + ".weight_zero_point' is missing");
      }
      return read_compressed_tensors(CtViews{packed, shape, scale, zp, maybe(lookup, prefix, "weight_g_idx")},
                                     config.bits, config.group_size, CtPacking::kDense);
    }
    case QuantFormat::kBitsandbytes4bit:
      return make_error(ErrorCode::kUnsupported, "checkpoint: '" + std::string(prefix) +
                                                     "' is bitsandbytes 4-bit (float levels, not integer codes)");
  }
  return make_error(ErrorCode::kInternal, "read_quantized_linear: unknown format");
}

}  // namespace epk::layouts
