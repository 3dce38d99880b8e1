#include "codec/layouts/awq.h"

#include <string>

#include "codec/layouts/layout_util.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts {
namespace {

using detail::bad;
using detail::sz;

// One row of N codes <-> N/8 words in AWQ slot order.
void pack_awq_row(const std::uint8_t* codes, std::size_t words_n, std::uint32_t* out) {
  for (std::size_t c = 0; c < words_n; ++c) {
    std::uint32_t w = 0;
    for (int slot = 0; slot < 8; ++slot) w |= static_cast<std::uint32_t>(codes[8 * c + sz(kAwqOrder[sz(slot)])]) << (4 * slot);
    out[c] = w;
  }
}

void unpack_awq_row(const std::uint32_t* words, std::size_t words_n, std::uint8_t* codes) {
  for (std::size_t c = 0; c < words_n; ++c) {
    for (int slot = 0; slot < 8; ++slot) {
      codes[8 * c + sz(kAwqOrder[sz(slot)])] = static_cast<std::uint8_t>((words[c] >> (4 * slot)) & 0xFu);
    }
  }
}

}  // namespace

Result<QuantTensor> read_awq(const AwqViews& v, std::int64_t group_size) {
  EPK_TRY(check_view(v.qweight, "qweight", detail::kIntWordTypes, std::vector<std::int64_t>{-1, -1}));
  const std::int64_t k = v.qweight.shape[0], wn = v.qweight.shape[1], n = wn * 8;
  if (k == 0 || n == 0) return bad(v.qweight, "empty weight");
  const std::int64_t g = group_size <= 0 ? k : group_size;
  if (k % g != 0) {
    return bad(v.qweight, "K = " + std::to_string(k) + " is not a multiple of group size " + std::to_string(g));
  }
  const std::int64_t groups = k / g;
  EPK_TRY(check_view(v.scales, "scales", detail::kFloatTypes, std::vector<std::int64_t>{groups, n}));
  EPK_TRY(check_view(v.qzeros, "qzeros", detail::kIntWordTypes, std::vector<std::int64_t>{groups, wn}));
  QuantTensor t = make_quant_tensor(4, k, n, g, v.scales.dtype);
  const auto qw = detail::words_of(v.qweight);
  for (std::int64_t r = 0; r < k; ++r) unpack_awq_row(qw.data() + r * wn, sz(wn), t.codes.data() + r * n);
  const auto qz = detail::words_of(v.qzeros);
  std::vector<std::uint8_t> zrow(sz(n));
  for (std::int64_t r = 0; r < groups; ++r) {
    unpack_awq_row(qz.data() + r * wn, sz(wn), zrow.data());
    for (std::int64_t c = 0; c < n; ++c) t.zeros[sz(r * n + c)] = zrow[sz(c)];
  }
  t.scales = detail::floats_of(v.scales);
  EPK_TRY(validate(t));
  return t;
}

Result<std::vector<Tensor>> write_awq(const QuantTensor& t) {
  EPK_TRY(validate(t));
  if (t.bits != 4) return make_error(ErrorCode::kUnsupported, "awq: only 4-bit codes, got " + std::to_string(t.bits));
  const std::int64_t k = t.padded_rows, n = t.padded_cols;
  if (k % t.group_size != 0 || n % 8 != 0 || t.num_groups != k / t.group_size) {
    return make_error(ErrorCode::kInvalidArgument, "awq: [" + std::to_string(k) + ", " + std::to_string(n) +
                                                       "] needs K % group_size (" + std::to_string(t.group_size) +
                                                       ") == 0 and N % 8 == 0; pad_to first");
  }
  if (!has_static_groups(t)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "awq: groups are not contiguous (act-order g_idx) and AWQ has no g_idx; sort_groups first and "
                      "permute the activations by its perm");
  }
  const std::int64_t wn = n / 8;
  std::vector<std::uint32_t> qweight(sz(k * wn)), qzeros(sz(t.num_groups * wn));
  for (std::int64_t r = 0; r < k; ++r) pack_awq_row(t.codes.data() + r * n, sz(wn), qweight.data() + r * wn);
  std::vector<std::uint8_t> zrow(sz(n));
  for (std::int64_t r = 0; r < t.num_groups; ++r) {
    for (std::int64_t c = 0; c < n; ++c) zrow[sz(c)] = static_cast<std::uint8_t>(t.zeros[sz(r * n + c)]);
    pack_awq_row(zrow.data(), sz(wn), qzeros.data() + r * wn);
  }
  std::vector<Tensor> out;
  out.push_back(make_i32_tensor("qweight", {k, wn}, detail::as_i32(qweight)));
  out.push_back(make_i32_tensor("qzeros", {t.num_groups, wn}, detail::as_i32(qzeros)));
  out.push_back(make_float_tensor("scales", {t.num_groups, n}, t.scales, t.scale_dtype));
  return out;
}

}  // namespace epk::layouts
