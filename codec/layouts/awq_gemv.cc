#include "codec/layouts/awq_gemv.h"

#include <string>

#include "codec/layouts/layout_util.h"

namespace epk::layouts {
namespace {

using detail::bad;
using detail::sz;

Error invalid(const std::string& what) { return make_error(ErrorCode::kInvalidArgument, "awq gemv: " + what); }

}  // namespace

std::int64_t awq_gemv_zeros_width(std::int64_t k, std::int64_t group_size) {
  if (k <= 0 || group_size <= 0) return 0;
  std::int64_t m = 1;
  if (group_size < 128) {
    if (group_size == 64) {
      m = 2;
    } else if (group_size == 32) {
      m = 4;
    } else {
      return 0;
    }
  }
  const std::int64_t base = (k / group_size + 7) / 8;
  return (base + m - 1) / m * m;
}

Result<QuantTensor> read_awq_gemv(const AwqGemvViews& v, std::int64_t group_size) {
  EPK_TRY(check_view(v.qweight, "qweight", detail::kIntWordTypes, std::vector<std::int64_t>{-1, -1}));
  const std::int64_t n = v.qweight.shape[0], wk = v.qweight.shape[1], k = wk * 8;
  if (k == 0 || n == 0) return bad(v.qweight, "empty weight");
  if (n % 8 != 0) return bad(v.qweight, "N = " + std::to_string(n) + " is not a multiple of 8");
  const std::int64_t g = group_size <= 0 ? k : group_size;
  if (k % g != 0) {
    return bad(v.qweight, "K = " + std::to_string(k) + " is not a multiple of group size " + std::to_string(g));
  }
  const std::int64_t width = awq_gemv_zeros_width(k, g);
  if (width == 0) return bad(v.qweight, "group size " + std::to_string(g) + " has no GEMV layout (32, 64, >= 128)");
  const std::int64_t groups = k / g;
  EPK_TRY(check_view(v.qzeros, "qzeros", detail::kIntWordTypes, std::vector<std::int64_t>{n, width}));
  EPK_TRY(check_view(v.scales, "scales", detail::kFloatTypes, std::vector<std::int64_t>{n, 8 * width}));
  QuantTensor t = make_quant_tensor(4, k, n, g, v.scales.dtype);
  const auto qw = detail::words_of(v.qweight);
  const auto qz = detail::words_of(v.qzeros);
  for (std::int64_t c = 0; c < n; ++c) {
    for (std::int64_t r = 0; r < k; ++r) {
      const std::uint32_t word = qw[sz(c * wk + r / 8)];
      t.codes[sz(r * n + c)] = static_cast<std::uint8_t>((word >> (4 * (r % 8))) & 0xFu);
    }
    for (std::int64_t grp = 0; grp < groups; ++grp) {
      const std::uint32_t word = qz[sz(c * width + grp / 8)];
      t.zeros[sz(grp * n + c)] = static_cast<std::int32_t>((word >> (4 * (grp % 8))) & 0xFu);
      t.scales[sz(grp * n + c)] = view_float(v.scales, sz(c * 8 * width + grp));
    }
  }
  EPK_TRY(validate(t));
  return t;
}

Result<std::vector<Tensor>> write_awq_gemv(const QuantTensor& t) {
  EPK_TRY(validate(t));
  if (t.bits != 4) {
    return make_error(ErrorCode::kUnsupported, "awq gemv: only 4-bit codes, got " + std::to_string(t.bits));
  }
  const std::int64_t k = t.padded_rows, n = t.padded_cols, g = t.group_size;
  if (k % g != 0 || k % 8 != 0 || n % 8 != 0 || t.num_groups != k / g) {
    return invalid("[" + std::to_string(k) + ", " + std::to_string(n) + "] needs K % group_size (" +
                   std::to_string(g) + ") == 0, K % 8 == 0 and N % 8 == 0; pad_to first");
  }
  if (!has_static_groups(t)) {
    return invalid("groups are not contiguous (act-order g_idx) and AWQ has no g_idx; sort_groups first and permute "
                   "the activations by its perm");
  }
  const std::int64_t width = awq_gemv_zeros_width(k, g);
  if (width == 0) {
    return make_error(ErrorCode::kUnsupported,
                      "awq gemv: group size " + std::to_string(g) + " has no GEMV layout (32, 64, >= 128)");
  }
  const std::int64_t wk = k / 8;
  std::vector<std::uint32_t> qweight(sz(n * wk), 0), qzeros(sz(n * width), 0);
  std::vector<float> scales(sz(n * 8 * width), 0.0f);
  for (std::int64_t c = 0; c < n; ++c) {
    for (std::int64_t r = 0; r < k; ++r) {
      qweight[sz(c * wk + r / 8)] |= static_cast<std::uint32_t>(t.codes[sz(r * n + c)]) << (4 * (r % 8));
    }
    for (std::int64_t grp = 0; grp < t.num_groups; ++grp) {
      qzeros[sz(c * width + grp / 8)] |= static_cast<std::uint32_t>(t.zeros[sz(grp * n + c)]) << (4 * (grp % 8));
      scales[sz(c * 8 * width + grp)] = t.scales[sz(grp * n + c)];
    }
  }
  std::vector<Tensor> out;
  out.push_back(make_i32_tensor("qweight", {n, wk}, detail::as_i32(qweight)));
  out.push_back(make_i32_tensor("qzeros", {n, width}, detail::as_i32(qzeros)));
  out.push_back(make_float_tensor("scales", {n, 8 * width}, scales, t.scale_dtype));
  return out;
}

}  // namespace epk::layouts
