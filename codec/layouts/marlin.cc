#include "codec/layouts/marlin.h"

#include <string>

#include "codec/layouts/layout_util.h"
#include "codec/layouts/pack_bits.h"

namespace epk::layouts {
namespace {

using detail::bad;
using detail::sz;

constexpr std::int64_t kTile = 16;
constexpr std::size_t kChunk = 1024;

// tiled[r][t*256 + i*16 + j] = codes[16r + i][16t + j] for tile row r, tile t; and the inverse.
std::size_t tiled_index(std::int64_t k, std::int64_t n, std::int64_t cols) {
  const std::int64_t r = k / kTile, i = k % kTile, t = n / kTile, j = n % kTile;
  return sz(r * cols + t * kTile * kTile + i * kTile + j);
}

bool scattered(const QuantTensor& t) { return !has_static_groups(t) || !t.perm.empty(); }

}  // namespace

std::vector<int> marlin_weight_perm(int bits) {
  std::vector<int> perm;
  perm.reserve(kChunk);
  for (int i = 0; i < 32; ++i) {
    std::vector<int> perm1;
    const int col = i / 4;
    for (int block = 0; block < 2; ++block) {
      for (int row : {2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1}) {
        perm1.push_back(16 * row + col + 8 * block);
      }
    }
    for (int j = 0; j < 4; ++j) {
      for (int p : perm1) perm.push_back(p + 256 * j);
    }
  }
  const std::vector<int> inter = bits == 8 ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<int> out(perm.size());
  for (std::size_t base = 0; base < perm.size(); base += inter.size()) {
    for (std::size_t i = 0; i < inter.size(); ++i) out[base + i] = perm[base + sz(inter[i])];
  }
  return out;
}

std::vector<int> marlin_scale_perm() {
  std::vector<int> p;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) p.push_back(i + 8 * j);
  }
  return p;
}

std::vector<int> marlin_scale_perm_single() {
  std::vector<int> p;
  for (int i = 0; i < 4; ++i) {
    for (int j : {0, 1, 8, 9, 16, 17, 24, 25}) p.push_back(2 * i + j);
  }
  return p;
}

Result<std::vector<Tensor>> write_marlin(const QuantTensor& src) {
  EPK_TRY(validate(src));
  if (src.bits != 4 && src.bits != 8) {
    return make_error(ErrorCode::kUnsupported, "marlin: bits " + std::to_string(src.bits) + " (expected 4 or 8)");
  }
  if (!is_symmetric(src)) {
    return make_error(ErrorCode::kUnsupported, "marlin: the GPTQ Marlin path is symmetric only (zero " +
                                                   std::to_string(1 << (src.bits - 1)) + " everywhere)");
  }
  const std::int64_t k = src.padded_rows, n = src.padded_cols;
  if (k % kTile != 0 || n % 64 != 0) {
    return make_error(ErrorCode::kInvalidArgument, "marlin: [" + std::to_string(k) + ", " + std::to_string(n) +
                                                       "] needs K % 16 == 0 and N % 64 == 0; pad_to first");
  }
  QuantTensor t = src;
  const bool act_order = scattered(src);
  if (act_order && !has_static_groups(src)) {
    EPK_TRY_ASSIGN(t, sort_groups(src));
  }
  const std::int64_t cols = kTile * n;  // values per tile row
  std::vector<std::uint8_t> tiled(t.codes.size());
  for (std::int64_t r = 0; r < k; ++r) {
    for (std::int64_t c = 0; c < n; ++c) tiled[tiled_index(r, c, cols)] = t.codes[sz(r * n + c)];
  }
  const std::vector<int> perm = marlin_weight_perm(t.bits);
  std::vector<std::uint8_t> permuted(tiled.size());
  for (std::size_t base = 0; base < tiled.size(); base += kChunk) {
    for (std::size_t p = 0; p < kChunk; ++p) permuted[base + p] = tiled[base + sz(perm[p])];
  }
  std::vector<std::uint32_t> words(packed_words(permuted.size(), t.bits));
  EPK_TRY(pack_bits(permuted, t.bits, words));

  const bool grouped = t.group_size < k;
  const std::vector<int> sperm = grouped ? marlin_scale_perm() : marlin_scale_perm_single();
  std::vector<float> scales(t.scales.size());
  for (std::size_t base = 0; base < scales.size(); base += sperm.size()) {
    for (std::size_t i = 0; i < sperm.size(); ++i) scales[base + i] = t.scales[base + sz(sperm[i])];
  }
  std::vector<Tensor> out;
  out.push_back(make_i32_tensor("qweight", {k / kTile, cols * t.bits / 32}, detail::as_i32(words)));
  out.push_back(make_float_tensor("scales", {t.num_groups, n}, scales, t.scale_dtype));
  if (act_order) {
    out.push_back(make_i32_tensor("g_idx", {k}, t.g_idx));
    std::vector<std::int32_t> p = t.perm;
    if (p.empty()) {
      for (std::int64_t i = 0; i < k; ++i) p.push_back(static_cast<std::int32_t>(i));
    }
    out.push_back(make_i32_tensor("perm", {k}, p));
  }
  return out;
}

Result<QuantTensor> read_marlin(const MarlinViews& v, int bits, std::int64_t k, std::int64_t group_size) {
  if (bits != 4 && bits != 8) {
    return make_error(ErrorCode::kUnsupported, "marlin: bits " + std::to_string(bits) + " (expected 4 or 8)");
  }
  if (k <= 0 || k % kTile != 0) {
    return bad(v.qweight, "K = " + std::to_string(k) + " is not a positive multiple of 16");
  }
  EPK_TRY(check_view(v.qweight, "qweight", detail::kIntWordTypes, std::vector<std::int64_t>{k / kTile, -1}));
  const std::int64_t wcols = v.qweight.shape[1];
  const std::int64_t cols = wcols * 32 / bits, n = cols / kTile;
  if (n % 64 != 0 || n * kTile * bits != wcols * 32) {
    return bad(v.qweight, std::to_string(wcols) + " words per tile row do not give N % 64 == 0");
  }
  const std::int64_t g = group_size <= 0 ? k : group_size;
  const std::int64_t groups = (k + g - 1) / g;
  EPK_TRY(check_view(v.scales, "scales", detail::kFloatTypes, std::vector<std::int64_t>{groups, n}));
  if (v.g_idx.has_value() != v.perm.has_value()) {
    return bad(v.qweight, "marlin act-order needs both g_idx and perm");
  }
  QuantTensor t = make_quant_tensor(bits, k, n, g, v.scales.dtype);
  std::vector<std::uint8_t> permuted(t.codes.size());
  EPK_TRY(unpack_bits(detail::words_of(v.qweight), bits, permuted));
  const std::vector<int> perm = marlin_weight_perm(bits);
  std::vector<std::uint8_t> tiled(permuted.size());
  for (std::size_t base = 0; base < tiled.size(); base += kChunk) {
    for (std::size_t p = 0; p < kChunk; ++p) tiled[base + sz(perm[p])] = permuted[base + p];
  }
  for (std::int64_t r = 0; r < k; ++r) {
    for (std::int64_t c = 0; c < n; ++c) t.codes[sz(r * n + c)] = tiled[tiled_index(r, c, cols)];
  }
  const std::vector<float> stored = detail::floats_of(v.scales);
  const std::vector<int> sperm = g < k ? marlin_scale_perm() : marlin_scale_perm_single();
  for (std::size_t base = 0; base < stored.size(); base += sperm.size()) {
    for (std::size_t i = 0; i < sperm.size(); ++i) t.scales[base + sz(sperm[i])] = stored[base + i];
  }
  t.zeros.assign(t.zeros.size(), 1 << (bits - 1));
  if (v.g_idx) {
    EPK_TRY(detail::read_g_idx(*v.g_idx, t));
    constexpr DType kI32[] = {DType::kI32};
    const std::int64_t shape[] = {k};
    EPK_TRY(check_view(*v.perm, "perm", kI32, shape));
    t.perm.resize(sz(k));
    for (std::size_t i = 0; i < t.perm.size(); ++i) t.perm[i] = view_i32(*v.perm, i);
  }
  EPK_TRY(validate(t));
  if (!t.perm.empty()) {
    // validate accepts a shard's feature indices; a stored Marlin perm must be a full permutation.
    for (std::int32_t p : t.perm) {
      if (p >= k) return bad(*v.perm, "entry " + std::to_string(p) + " outside 0.." + std::to_string(k - 1));
    }
  }
  return t;
}

}  // namespace epk::layouts
