#include "codec/layouts/footprint.h"

#include "codec/layouts/gguf.h"

namespace epk::layouts {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Footprint footprint_of(std::span<const Tensor> tensors, std::uint64_t logical_weights) {
  Footprint f;
  f.weights = logical_weights;
  for (const Tensor& t : tensors) {
    const std::string_view n = t.name;
    const std::uint64_t b = t.bytes.size();
    if (ends_with(n, "qweight") || ends_with(n, "weight_packed") || n == "weight" || ends_with(n, ".weight")) {
      f.code_bytes += b;
    } else if (ends_with(n, "qzeros") || ends_with(n, "weight_zero_point")) {
      f.zero_bytes += b;
    } else if (ends_with(n, "scales") || ends_with(n, "weight_scale") || ends_with(n, "absmax") ||
               ends_with(n, "quant_map")) {
      f.scale_bytes += b;
    } else {
      f.index_bytes += b;
    }
  }
  return f;
}

Footprint gguf_footprint(std::uint32_t type, std::uint64_t n_elements) {
  Footprint f;
  const auto traits = gguf::type_traits(type);
  if (!traits) return f;
  f.weights = n_elements;
  const std::uint64_t blocks = n_elements / traits->block_size;
  std::uint64_t code_per_block = traits->type_size;  // plain types: all bytes are values
  switch (static_cast<gguf::GgmlType>(type)) {
    case gguf::GgmlType::kQ4_0: case gguf::GgmlType::kQ4_1: code_per_block = 16; break;
    case gguf::GgmlType::kQ5_0: case gguf::GgmlType::kQ5_1: code_per_block = 20; break;
    case gguf::GgmlType::kQ8_0: case gguf::GgmlType::kQ8_1: code_per_block = 32; break;
    case gguf::GgmlType::kQ2_K: code_per_block = 64; break;
    case gguf::GgmlType::kQ3_K: code_per_block = 96; break;
    case gguf::GgmlType::kQ4_K: code_per_block = 128; break;
    case gguf::GgmlType::kQ5_K: code_per_block = 160; break;
    case gguf::GgmlType::kQ6_K: code_per_block = 192; break;
    case gguf::GgmlType::kQ8_K: code_per_block = 256; break;
    case gguf::GgmlType::kIQ4_NL: code_per_block = 16; break;
    case gguf::GgmlType::kIQ4_XS: code_per_block = 128; break;
    default: break;
  }
  f.code_bytes = blocks * code_per_block;
  f.scale_bytes = blocks * (traits->type_size - code_per_block);
  return f;
}

}  // namespace epk::layouts
