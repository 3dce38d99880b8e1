// Helpers shared by the layout readers and writers (not public API).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/layouts/quant_tensor.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts::detail {

inline constexpr DType kIntWordTypes[] = {DType::kI32, DType::kU32};
inline constexpr DType kFloatTypes[] = {DType::kF16, DType::kBF16, DType::kF32};

inline std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

inline std::vector<std::uint32_t> words_of(const TensorView& v) {
  std::vector<std::uint32_t> w(v.bytes.size() / 4);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = load_le<std::uint32_t>(v.bytes.data() + 4 * i);
  return w;
}

inline std::vector<float> floats_of(const TensorView& v) {
  std::vector<float> f(sz(v.numel()));
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = view_float(v, i);
  return f;
}

inline std::vector<std::int32_t> as_i32(const std::vector<std::uint32_t>& w) {
  return std::vector<std::int32_t>(w.begin(), w.end());
}

inline Error bad(const TensorView& v, const std::string& what) {
  return make_error(ErrorCode::kBadInput, "tensor '" + std::string(v.name) + "': " + what);
}

// Reads g_idx I32/I64 [rows] into t.g_idx, checking every entry against num_groups.
Status read_g_idx(const TensorView& v, QuantTensor& t);

// The rows of t in original feature order when t.perm is a full permutation (for layouts that carry g_idx).
Result<QuantTensor> unpermute_rows(const QuantTensor& t);

}  // namespace epk::layouts::detail
