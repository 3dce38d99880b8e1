#include "codec/layouts/requantize.h"

#include <algorithm>
#include <cmath>

#include "codec/common/bytes.h"
#include "codec/common/half.h"

namespace epk::layouts {
namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

}  // namespace

Result<Requantized> requantize_rtn(std::span<const float> w, std::int64_t rows, std::int64_t cols, int bits,
                                   std::int64_t group_size, bool symmetric) {
  if (bits < 2 || bits > 8 || rows <= 0 || cols <= 0 || w.size() != sz(rows * cols)) {
    return make_error(ErrorCode::kInvalidArgument, "requantize: bad sizes or bits");
  }
  Requantized out;
  QuantTensor& t = out.tensor;
  t = make_quant_tensor(bits, rows, cols, group_size);
  const int maxq = (1 << bits) - 1;
  for (std::int64_t g = 0; g < t.num_groups; ++g) {
    const std::int64_t k0 = g * t.group_size, k1 = std::min(rows, k0 + t.group_size);
    for (std::int64_t n = 0; n < cols; ++n) {
      float lo = 0, hi = 0;
      for (std::int64_t k = k0; k < k1; ++k) {
        const float v = w[sz(k * cols + n)];
        if (!std::isfinite(v)) return make_error(ErrorCode::kInvalidArgument, "requantize: non-finite weight");
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      float scale;
      std::int32_t zero = 0;
      if (symmetric) {
        const float amax = std::max(-lo, hi);
        zero = 1 << (bits - 1);
        scale = amax == 0 ? 1.0f : amax / static_cast<float>(zero);
      } else {
        scale = hi == lo ? 1.0f : (hi - lo) / static_cast<float>(maxq);
      }
      scale = f16_to_f32(f32_to_f16(scale));  // stored as fp16: quantize against the value readers will see
      if (scale == 0) scale = f16_to_f32(1);  // an underflowed scale: the group is ~0 anyway
      if (!symmetric) zero = std::clamp(static_cast<std::int32_t>(std::lround(-lo / scale)), 0, maxq);
      t.scales[sz(g * cols + n)] = scale;
      t.zeros[sz(g * cols + n)] = zero;
      for (std::int64_t k = k0; k < k1; ++k) {
        const long q = std::lround(w[sz(k * cols + n)] / scale) + zero;
        t.codes[sz(k * cols + n)] = static_cast<std::uint8_t>(std::clamp<long>(q, 0, maxq));
      }
    }
  }
  const std::vector<float> back = dequantize_f32(t);
  double se = 0, sw = 0;
  for (std::size_t i = 0; i < back.size(); ++i) {
    const double d = static_cast<double>(w[i]) - back[i];
    out.error.max_abs = std::max(out.error.max_abs, std::abs(d));
    se += d * d;
    sw += static_cast<double>(w[i]) * w[i];
  }
  out.error.rms = std::sqrt(se / static_cast<double>(back.size()));
  out.error.rel_rms = sw > 0 ? std::sqrt(se / sw) : 0.0;
  return out;
}

Result<QuantTensor> gguf_to_quant_tensor(const gguf::TensorInfo& info, std::span<const std::uint8_t> bytes) {
  const auto type = static_cast<gguf::GgmlType>(info.type);
  if (type != gguf::GgmlType::kQ4_0 && type != gguf::GgmlType::kQ8_0) {
    return make_error(ErrorCode::kUnsupported, "gguf tensor '" + std::string(info.name) +
                                                   "': only Q4_0 and Q8_0 map exactly onto integer codes; "
                                                   "requantize the others");
  }
  if (info.ne.size() != 2 || info.ne[0] % 32 != 0 || bytes.size() != info.n_bytes) {
    return make_error(ErrorCode::kInvalidArgument, "gguf tensor '" + std::string(info.name) + "': not a 2-D [K, N]");
  }
  EPK_TRY(gguf::check_block_scales(info.type, bytes, info.n_elements, "gguf tensor '" + std::string(info.name) + "'"));
  const bool q4 = type == gguf::GgmlType::kQ4_0;
  const std::int64_t k = static_cast<std::int64_t>(info.ne[0]), n = static_cast<std::int64_t>(info.ne[1]);
  QuantTensor t = make_quant_tensor(q4 ? 4 : 8, k, n, 32);
  const std::size_t block_bytes = q4 ? 18 : 34;
  t.zeros.assign(t.zeros.size(), q4 ? 8 : 128);
  for (std::int64_t col = 0; col < n; ++col) {      // ggml row = output feature
    for (std::int64_t b = 0; b < k / 32; ++b) {
      const std::uint8_t* blk = bytes.data() + (sz(col) * sz(k / 32) + sz(b)) * block_bytes;
      t.scales[sz(b * n + col)] = f16_to_f32(load_le<std::uint16_t>(blk));
      for (int j = 0; j < 32; ++j) {
        std::uint8_t code;
        if (q4) {
          code = static_cast<std::uint8_t>(j < 16 ? (blk[2 + j] & 0xF) : (blk[2 + j - 16] >> 4));
        } else {
          code = static_cast<std::uint8_t>(static_cast<std::int8_t>(blk[2 + j]) + 128);
        }
        t.codes[sz((b * 32 + j) * n + col)] = code;
      }
    }
  }
  return t;
}

}  // namespace epk::layouts
