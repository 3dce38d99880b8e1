#include "codec/layouts/gptq.h"

#include <string>

#include "codec/layouts/layout_util.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts {

using detail::bad;
using detail::sz;

Result<QuantTensor> read_gptq(const GptqViews& v, int bits, std::int64_t group_size, GptqZeros zeros) {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8) {
    return make_error(ErrorCode::kUnsupported, "gptq: bits " + std::to_string(bits) + " (expected 2, 3, 4 or 8)");
  }
  EPK_TRY(check_view(v.qweight, "qweight", detail::kIntWordTypes, std::vector<std::int64_t>{-1, -1}));
  const std::int64_t word_rows = v.qweight.shape[0], n = v.qweight.shape[1];
  const std::int64_t k = word_rows * 32 / bits;
  if ((word_rows * 32) % bits != 0) {
    return bad(v.qweight, std::to_string(word_rows) + " word rows do not hold whole " + std::to_string(bits) +
                              "-bit rows");
  }
  EPK_TRY(check_view(v.scales, "scales", detail::kFloatTypes, std::vector<std::int64_t>{-1, n}));
  const std::int64_t groups = v.scales.shape[0];
  if (k == 0 || n == 0) return bad(v.qweight, "empty weight");
  const std::int64_t g = group_size <= 0 ? k : group_size;
  if (k > 0 && groups != (k + g - 1) / g) {
    return bad(v.scales, std::to_string(groups) + " groups, but K = " + std::to_string(k) + " with group size " +
                             std::to_string(g) + " needs " + std::to_string((k + g - 1) / g));
  }
  EPK_TRY(check_view(v.qzeros, "qzeros", detail::kIntWordTypes,
                     std::vector<std::int64_t>{groups, static_cast<std::int64_t>(packed_words(sz(n), bits))}));

  QuantTensor t = make_quant_tensor(bits, k, n, g, v.scales.dtype);
  EPK_TRY(unpack_rows(detail::words_of(v.qweight), sz(k), sz(n), bits, t.codes));
  t.scales = detail::floats_of(v.scales);
  const std::vector<std::uint32_t> zwords = detail::words_of(v.qzeros);
  const std::size_t zw_per_row = packed_words(sz(n), bits);
  std::vector<std::uint8_t> zrow(sz(n));
  const std::int32_t mask = (1 << bits) - 1;
  for (std::int64_t r = 0; r < groups; ++r) {
    EPK_TRY(unpack_bits(std::span(zwords).subspan(sz(r) * zw_per_row, zw_per_row), bits, zrow));
    for (std::int64_t c = 0; c < n; ++c) {
      // v1: +1 and then the mask, in that order; without the mask a stored 2^b-1 becomes 2^b (docs/LAYOUTS.md 6.3).
      const std::int32_t z = zrow[sz(c)];
      t.zeros[sz(r * n + c)] = zeros == GptqZeros::kV1 ? ((z + 1) & mask) : z;
    }
  }
  if (v.g_idx) EPK_TRY(detail::read_g_idx(*v.g_idx, t));
  EPK_TRY(validate(t));
  return t;
}

Result<std::vector<Tensor>> write_gptq(const QuantTensor& src, GptqZeros zeros) {
  EPK_TRY(validate(src));
  const int bits = src.bits;
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8) {
    return make_error(ErrorCode::kUnsupported, "gptq: cannot write " + std::to_string(bits) + "-bit codes");
  }
  if ((src.padded_rows * bits) % 32 != 0 || (src.padded_cols * bits) % 32 != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gptq: [" + std::to_string(src.padded_rows) + ", " + std::to_string(src.padded_cols) +
                          "] times " + std::to_string(bits) + " bits is not whole words on both axes; pad_to first");
  }
  EPK_TRY_ASSIGN(QuantTensor t, detail::unpermute_rows(src));
  const std::int64_t k = t.padded_rows, n = t.padded_cols;
  const std::int32_t mask = (1 << bits) - 1;
  std::vector<std::uint8_t> stored(t.zeros.size());
  for (std::size_t i = 0; i < t.zeros.size(); ++i) {
    if (zeros == GptqZeros::kV1 && t.zeros[i] == 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "gptq v1: zero point 0 at group " + std::to_string(i / sz(n)) + ", column " +
                            std::to_string(i % sz(n)) +
                            " cannot be stored as z-1 (readers without a mask see 2^b); write gptq_v2");
    }
    stored[i] = static_cast<std::uint8_t>(zeros == GptqZeros::kV1 ? (t.zeros[i] - 1) & mask : t.zeros[i]);
  }
  std::vector<std::uint32_t> qweight(sz(k * bits / 32) * sz(n));
  EPK_TRY(pack_rows(t.codes, sz(k), sz(n), bits, qweight));
  const std::size_t zw = sz(n * bits / 32);
  std::vector<std::uint32_t> qzeros(sz(t.num_groups) * zw);
  for (std::int64_t r = 0; r < t.num_groups; ++r) {
    EPK_TRY(pack_bits(std::span(stored).subspan(sz(r * n), sz(n)), bits, std::span(qzeros).subspan(sz(r) * zw, zw)));
  }
  std::vector<Tensor> out;
  out.push_back(make_i32_tensor("qweight", {k * bits / 32, n}, detail::as_i32(qweight)));
  out.push_back(make_i32_tensor("qzeros", {t.num_groups, static_cast<std::int64_t>(zw)}, detail::as_i32(qzeros)));
  out.push_back(make_float_tensor("scales", {t.num_groups, n}, t.scales, t.scale_dtype));
  out.push_back(make_i32_tensor("g_idx", {k}, t.g_idx));
  return out;
}

Status gptq_v1_to_v2_words(std::span<std::uint32_t> qzeros_words, int bits) {
  std::uint32_t add = 0;
  switch (bits) {
    case 2: add = 0x55555555u; break;
    case 4: add = 0x11111111u; break;
    case 8: add = 0x01010101u; break;
    default:
      return make_error(ErrorCode::kUnsupported,
                        "gptq v1->v2 word add: " + std::to_string(bits) + "-bit fields need per-field correction");
  }
  const std::uint32_t field = (1u << bits) - 1u;
  for (std::size_t i = 0; i < qzeros_words.size(); ++i) {
    for (int s = 0; s < 32; s += bits) {
      if (((qzeros_words[i] >> s) & field) == field) {
        return make_error(ErrorCode::kInvalidArgument,
                          "gptq v1->v2: qzeros word " + std::to_string(i) + " has an all-ones field (z = 0) at bit " +
                              std::to_string(s) + "; adding 1 would carry into the next field");
      }
    }
  }
  for (auto& w : qzeros_words) w += add;
  return {};
}

}  // namespace epk::layouts
