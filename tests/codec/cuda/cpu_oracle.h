// The project's CPU decoder (codec/rans/decoder.h) producing what the GPU decoder produces for one OutputFormat:
// the oracle every GPU test compares against bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "codec/cuda/decode/decode.h"
#include "codec/rans/decoder.h"

namespace epk::testing {

struct HostResult {
  std::vector<std::uint8_t> values;
  std::vector<float> row_scales;  // rowwise formats only (else empty)
};

inline DType oracle_dtype(cuda::OutputFormat f) {
  switch (f) {
    case cuda::OutputFormat::kBf16:
      return DType::kBF16;
    case cuda::OutputFormat::kFp16:
      return DType::kF16;
    case cuda::OutputFormat::kFp32:
      return DType::kF32;
    case cuda::OutputFormat::kFp8E4M3:
      return DType::kF8E4M3;
    case cuda::OutputFormat::kFp8E5M2:
      return DType::kF8E5M2;
    default:
      return DType::kU8;  // rowwise: not a dense dtype
  }
}

// Rows [b, e) (e == 0: all). Corrupt tiles are appended to faults (their elements keep the 0 fill); with faults null
// the decode must succeed.
inline HostResult cpu_oracle(const rans::LatticeRansStream& s, cuda::OutputFormat f, std::uint32_t b, std::uint32_t e,
                             std::vector<rans::TileFaultRecord>* faults = nullptr) {
  if (e == 0) e = s.rows;
  HostResult r;
  r.values.assign(std::size_t{e - b} * s.cols * cuda::output_element_bytes(f), 0);
  Status st;
  if (cuda::is_rowwise(f)) {
    r.row_scales.assign(e - b, 0.0f);
    const auto type = f == cuda::OutputFormat::kInt8Rowwise ? rans::RowwiseType::kInt8 : rans::RowwiseType::kF8E4M3;
    st = rans::decode_rowwise(s, "oracle", type, std::as_writable_bytes(std::span(r.values)), r.row_scales, b, e, 1,
                              faults);
  } else {
    st = rans::decode_rows(s, "oracle", oracle_dtype(f), std::as_writable_bytes(std::span(r.values)), b, e, 1, faults);
  }
  if (faults == nullptr) {
    EXPECT_TRUE(st) << st.error().to_string();
  }
  return r;
}

}  // namespace epk::testing
