// The tensors layout readers take and writers produce: a name, a dtype, a shape (PyTorch order, outermost first)
// and little-endian bytes. Readers take views (a safetensors or .epk mapping can hand its bytes over without a copy);
// writers return owned tensors named by the format's suffix ("qweight", "scales", ...), which the caller prefixes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/common/bytes.h"
#include "codec/common/dtype.h"
#include "codec/common/result.h"

namespace epk::layouts {

struct TensorView {
  std::string_view name;  // for error messages: "model.layers.0.mlp.down_proj.qweight"
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;

  std::int64_t numel() const;
};

struct Tensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;

  TensorView view() const { return TensorView{name, dtype, shape, bytes}; }
};

// Checks dtype, rank, every dim >= 0 and that bytes.size() matches numel * width. `what` names the tensor's role in
// messages ("qzeros") when the view's name is empty. want_shape entries of -1 accept any extent.
Status check_view(const TensorView& v, std::string_view what, std::span<const DType> dtypes,
                  std::span<const std::int64_t> want_shape);

// Element reads of an already checked view (bounds are the caller's contract).
inline std::int32_t view_i32(const TensorView& v, std::size_t i) { return load_le<std::int32_t>(v.bytes.data() + 4 * i); }
// Reads F16, BF16 or F32 as float (exact for all three).
float view_float(const TensorView& v, std::size_t i);

// Owned tensors from typed host data.
Tensor make_i32_tensor(std::string name, std::vector<std::int64_t> shape, std::span<const std::int32_t> values);
Tensor make_u8_tensor(std::string name, std::vector<std::int64_t> shape, std::span<const std::uint8_t> values);
// Stores floats as F16 or BF16 (rounding to nearest even; exact when they came from that dtype), any other dtype as
// F32.
Tensor make_float_tensor(std::string name, std::vector<std::int64_t> shape, std::span<const float> values, DType dtype);

}  // namespace epk::layouts

