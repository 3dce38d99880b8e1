#include "codec/layouts/compressed_tensors.h"

#include <string>

#include "codec/layouts/layout_util.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts {
namespace {

using detail::bad;
using detail::sz;

std::size_t words_for(std::size_t n, int bits, CtPacking packing) {
  if (packing == CtPacking::kDense) return packed_words(n, bits);
  const std::size_t per = sz(32 / bits);
  return (n + per - 1) / per;
}

void pack_line(const std::uint8_t* codes, std::size_t n, int bits, CtPacking packing, std::uint32_t* out) {
  if (packing == CtPacking::kDense) {
    (void)pack_bits(std::span(codes, n), bits, std::span(out, packed_words(n, bits)));
    return;
  }
  const std::size_t per = sz(32 / bits);
  for (std::size_t w = 0; w < words_for(n, bits, packing); ++w) {
    std::uint32_t acc = 0;
    for (std::size_t j = 0; j < per && w * per + j < n; ++j) acc |= static_cast<std::uint32_t>(codes[w * per + j]) << (bits * j);
    out[w] = acc;
  }
}

void unpack_line(const std::uint32_t* words, std::size_t n, int bits, CtPacking packing, std::uint8_t* codes) {
  if (packing == CtPacking::kDense) {
    (void)unpack_bits(std::span(words, packed_words(n, bits)), bits, std::span(codes, n));
    return;
  }
  const std::size_t per = sz(32 / bits);
  const std::uint32_t mask = (1u << bits) - 1u;
  for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint8_t>((words[i / per] >> (bits * (i % per))) & mask);
}

}  // namespace

Result<QuantTensor> read_compressed_tensors(const CtViews& v, int bits, std::int64_t group_size, CtPacking packing) {
  if (bits < 1 || bits > 8) {
    return make_error(ErrorCode::kUnsupported, "compressed-tensors: bits " + std::to_string(bits));
  }
  constexpr DType kShapeTypes[] = {DType::kI32, DType::kI64};
  const std::int64_t two[] = {2};
  EPK_TRY(check_view(v.weight_shape, "weight_shape", kShapeTypes, two));
  auto dim = [&](std::size_t i) -> std::int64_t {
    return v.weight_shape.dtype == DType::kI32 ? load_le<std::int32_t>(v.weight_shape.bytes.data() + 4 * i)
                                               : load_le<std::int64_t>(v.weight_shape.bytes.data() + 8 * i);
  };
  const std::int64_t n = dim(0), k = dim(1);
  if (n <= 0 || k <= 0 || n > (1ll << 31) || k > (1ll << 31)) {
    return bad(v.weight_shape, "shape (" + std::to_string(n) + ", " + std::to_string(k) + ") out of range");
  }
  const std::size_t wk = words_for(sz(k), bits, packing);
  EPK_TRY(check_view(v.weight_packed, "weight_packed", detail::kIntWordTypes,
                     std::vector<std::int64_t>{n, static_cast<std::int64_t>(wk)}));
  const std::int64_t g = group_size <= 0 ? k : group_size;
  const std::int64_t groups = (k + g - 1) / g;
  EPK_TRY(check_view(v.weight_scale, "weight_scale", detail::kFloatTypes, std::vector<std::int64_t>{n, groups}));
  QuantTensor t = make_quant_tensor(bits, k, n, g, v.weight_scale.dtype);

  const auto packed = detail::words_of(v.weight_packed);
  std::vector<std::uint8_t> line(sz(k));
  for (std::int64_t r = 0; r < n; ++r) {  // r: output feature
    unpack_line(packed.data() + sz(r) * wk, sz(k), bits, packing, line.data());
    for (std::int64_t c = 0; c < k; ++c) t.codes[sz(c * n + r)] = line[sz(c)];
  }
  const auto scale = detail::floats_of(v.weight_scale);
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t gi = 0; gi < groups; ++gi) t.scales[sz(gi * n + r)] = scale[sz(r * groups + gi)];
  }
  if (v.weight_zero_point) {
    const std::size_t wz = words_for(sz(n), bits, packing);
    EPK_TRY(check_view(*v.weight_zero_point, "weight_zero_point", detail::kIntWordTypes,
                       std::vector<std::int64_t>{static_cast<std::int64_t>(wz), groups}));
    const auto zp = detail::words_of(*v.weight_zero_point);
    std::vector<std::uint32_t> col(wz);
    std::vector<std::uint8_t> zline(sz(n));
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      for (std::size_t w = 0; w < wz; ++w) col[w] = zp[w * sz(groups) + sz(gi)];
      unpack_line(col.data(), sz(n), bits, packing, zline.data());
      for (std::int64_t r = 0; r < n; ++r) t.zeros[sz(gi * n + r)] = zline[sz(r)];
    }
  } else {
    t.zeros.assign(t.zeros.size(), 1 << (bits - 1));
  }
  if (v.weight_g_idx) EPK_TRY(detail::read_g_idx(*v.weight_g_idx, t));
  EPK_TRY(validate(t));
  return t;
}

Result<std::vector<Tensor>> write_compressed_tensors(const QuantTensor& src, CtPacking packing) {
  EPK_TRY(validate(src));
  EPK_TRY_ASSIGN(QuantTensor t, detail::unpermute_rows(src));
  const std::int64_t k = t.rows, n = t.cols, pn = t.padded_cols;
  if (t.rows != t.padded_rows && !has_static_groups(t)) {
    return make_error(ErrorCode::kInvalidArgument, "compressed-tensors: padded rows with scattered groups");
  }
  const std::int64_t groups = (k + t.group_size - 1) / t.group_size;
  if (!has_static_groups(t) && groups != t.num_groups) {
    return make_error(ErrorCode::kInvalidArgument, "compressed-tensors: g_idx groups do not match K / group_size");
  }
  const std::size_t wk = words_for(sz(k), t.bits, packing);
  std::vector<std::uint32_t> packed(sz(n) * wk);
  std::vector<std::uint8_t> line(sz(k));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < k; ++c) line[sz(c)] = t.codes[sz(c * pn + r)];
    pack_line(line.data(), sz(k), t.bits, packing, packed.data() + sz(r) * wk);
  }
  std::vector<float> scale(sz(n * groups));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t gi = 0; gi < groups; ++gi) scale[sz(r * groups + gi)] = t.scales[sz(gi * pn + r)];
  }
  std::vector<Tensor> out;
  out.push_back(make_i32_tensor("weight_packed", {n, static_cast<std::int64_t>(wk)}, detail::as_i32(packed)));
  Tensor shape{"weight_shape", DType::kI64, {2}, std::vector<std::uint8_t>(16)};
  store_le<std::int64_t>(shape.bytes.data(), n);
  store_le<std::int64_t>(shape.bytes.data() + 8, k);
  out.push_back(std::move(shape));
  out.push_back(make_float_tensor("weight_scale", {n, groups}, scale, t.scale_dtype));
  if (!is_symmetric(t)) {
    const std::size_t wz = words_for(sz(n), t.bits, packing);
    std::vector<std::uint32_t> zp(wz * sz(groups)), col(wz);
    std::vector<std::uint8_t> zline(sz(n));
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      for (std::int64_t r = 0; r < n; ++r) zline[sz(r)] = static_cast<std::uint8_t>(t.zeros[sz(gi * pn + r)]);
      pack_line(zline.data(), sz(n), t.bits, packing, col.data());
      for (std::size_t w = 0; w < wz; ++w) zp[w * sz(groups) + sz(gi)] = col[w];
    }
    out.push_back(make_i32_tensor("weight_zero_point", {static_cast<std::int64_t>(wz), groups}, detail::as_i32(zp)));
  }
  if (!has_static_groups(t)) {
    out.push_back(make_i32_tensor("weight_g_idx", {k}, std::span(t.g_idx).first(sz(k))));
  }
  return out;
}

}  // namespace epk::layouts
