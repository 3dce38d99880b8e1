#include "shm/layout.h"

namespace epk::shm {

std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::kStored: return "stored";
    case Layout::kDenseBF16: return "dense:bf16";
    case Layout::kDenseF16: return "dense:fp16";
    case Layout::kDenseF32: return "dense:fp32";
    case Layout::kRowwiseF8E4M3: return "rowwise:fp8_e4m3";
    case Layout::kRowwiseI8: return "rowwise:int8";
  }
  return "unknown";
}

std::optional<Layout> layout_from_code(std::uint32_t code) {
  if (code >= kLayoutCount) return std::nullopt;
  return static_cast<Layout>(code);
}

std::optional<Layout> layout_from_name(std::string_view name) {
  for (std::uint32_t c = 0; c < kLayoutCount; ++c) {
    if (layout_name(static_cast<Layout>(c)) == name) return static_cast<Layout>(c);
  }
  return std::nullopt;
}

}  // namespace epk::shm
