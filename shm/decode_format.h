// Which codec/cuda output format writes a serving layout of a lattice-rans tensor: one rule for epkd's device path
// and libepk's client-side decode, so both write the same bytes for the same request.
#pragma once

#include <optional>

#include "codec/common/dtype.h"
#include "codec/cuda/decode.h"
#include "shm/layout.h"

namespace epk::shm {

// nullopt: the GPU decoder does not write this layout (epkd produces it on the CPU; libepk refuses it).
// kStored asks for the tensor's source dtype.
inline std::optional<cuda::OutputFormat> decode_format(Layout layout, DType source) {
  switch (layout) {
    case Layout::kStored:
      switch (source) {
        case DType::kBF16: return cuda::OutputFormat::kBf16;
        case DType::kF16: return cuda::OutputFormat::kFp16;
        case DType::kF32: return cuda::OutputFormat::kFp32;
        case DType::kF8E4M3: return cuda::OutputFormat::kFp8E4M3;
        case DType::kF8E5M2: return cuda::OutputFormat::kFp8E5M2;
        default: return std::nullopt;
      }
    case Layout::kDenseBF16: return cuda::OutputFormat::kBf16;
    case Layout::kDenseF16: return cuda::OutputFormat::kFp16;
    case Layout::kDenseF32: return cuda::OutputFormat::kFp32;
    case Layout::kRowwiseI8: return cuda::OutputFormat::kInt8Rowwise;
    case Layout::kRowwiseF8E4M3: return cuda::OutputFormat::kFp8E4M3Rowwise;
    default: return std::nullopt;
  }
}

}  // namespace epk::shm
