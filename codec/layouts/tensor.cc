#include "codec/layouts/tensor.h"

#include <algorithm>
#include <cstring>

#include "codec/common/half.h"

namespace epk::layouts {
namespace {

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? std::string("*") : std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace

std::int64_t TensorView::numel() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0 || !checked_mul(n, static_cast<std::uint64_t>(d), &n) || n > (1ull << 62)) return -1;
  }
  return static_cast<std::int64_t>(n);
}

Status check_view(const TensorView& v, std::string_view what, std::span<const DType> dtypes,
                  std::span<const std::int64_t> want_shape) {
  std::string who(v.name.empty() ? what : v.name);
  if (std::find(dtypes.begin(), dtypes.end(), v.dtype) == dtypes.end()) {
    std::string allowed;
    for (DType d : dtypes) allowed += (allowed.empty() ? "" : "/") + std::string(dtype_name(d));
    return make_error(ErrorCode::kBadInput,
                      "tensor '" + who + "': dtype " + std::string(dtype_name(v.dtype)) + ", expected " + allowed);
  }
  bool shape_ok = v.shape.size() == want_shape.size();
  for (std::size_t i = 0; shape_ok && i < want_shape.size(); ++i) {
    shape_ok = want_shape[i] < 0 ? v.shape[i] >= 0 : v.shape[i] == want_shape[i];
  }
  if (!shape_ok) {
    return make_error(ErrorCode::kBadInput, "tensor '" + who + "': shape " + shape_string(v.shape) + ", expected " +
                                                shape_string(want_shape));
  }
  const std::int64_t n = v.numel();
  std::uint64_t want_bytes = 0;
  if (n < 0 || !checked_mul(static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(dtype_bits(v.dtype)), &want_bytes) ||
      (want_bytes + 7) / 8 != v.bytes.size()) {
    return make_error(ErrorCode::kBadInput, "tensor '" + who + "': " + std::to_string(v.bytes.size()) +
                                                " bytes do not hold shape " + shape_string(v.shape) + " of " +
                                                std::string(dtype_name(v.dtype)));
  }
  return {};
}

float view_float(const TensorView& v, std::size_t i) {
  switch (v.dtype) {
    case DType::kF16: return f16_to_f32(load_le<std::uint16_t>(v.bytes.data() + 2 * i));
    case DType::kBF16: return bf16_to_f32(load_le<std::uint16_t>(v.bytes.data() + 2 * i));
    default: return load_le<float>(v.bytes.data() + 4 * i);
  }
}

Tensor make_i32_tensor(std::string name, std::vector<std::int64_t> shape, std::span<const std::int32_t> values) {
  Tensor t{std::move(name), DType::kI32, std::move(shape), std::vector<std::uint8_t>(values.size() * 4)};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

Tensor make_u8_tensor(std::string name, std::vector<std::int64_t> shape, std::span<const std::uint8_t> values) {
  return Tensor{std::move(name), DType::kU8, std::move(shape), std::vector<std::uint8_t>(values.begin(), values.end())};
}

Tensor make_float_tensor(std::string name, std::vector<std::int64_t> shape, std::span<const float> values,
                         DType dtype) {
  if (dtype != DType::kF16 && dtype != DType::kBF16) dtype = DType::kF32;
  Tensor t{std::move(name), dtype, std::move(shape), {}};
  if (dtype == DType::kF32) {
    t.bytes.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
  }
  t.bytes.resize(values.size() * 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    store_le<std::uint16_t>(t.bytes.data() + 2 * i, dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]));
  }
  return t;
}

}  // namespace epk::layouts
