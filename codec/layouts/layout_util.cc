#include "codec/layouts/layout_util.h"

#include <algorithm>

namespace epk::layouts::detail {

Status read_g_idx(const TensorView& v, QuantTensor& t) {
  constexpr DType kTypes[] = {DType::kI32, DType::kI64};
  const std::int64_t shape[] = {t.padded_rows};
  EPK_TRY(check_view(v, "g_idx", kTypes, shape));
  t.g_idx.resize(sz(t.padded_rows));
  for (std::size_t k = 0; k < t.g_idx.size(); ++k) {
    const std::int64_t g = v.dtype == DType::kI32 ? load_le<std::int32_t>(v.bytes.data() + 4 * k)
                                                  : load_le<std::int64_t>(v.bytes.data() + 8 * k);
    if (g < 0 || g >= t.num_groups) {
      return bad(v, "g_idx[" + std::to_string(k) + "] = " + std::to_string(g) + " outside 0.." +
                        std::to_string(t.num_groups - 1));
    }
    t.g_idx[k] = static_cast<std::int32_t>(g);
  }
  return {};
}

Result<QuantTensor> unpermute_rows(const QuantTensor& t) {
  if (t.perm.empty()) return t;
  QuantTensor out = t;
  out.perm.clear();
  for (std::size_t k = 0; k < t.perm.size(); ++k) {
    const std::int32_t dst = t.perm[k];
    if (dst < 0 || sz(dst) >= t.perm.size()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "quant tensor: perm is a shard's feature index, not a permutation; cannot restore row order");
    }
    std::copy_n(t.codes.begin() + k * sz(t.padded_cols), t.padded_cols,
                out.codes.begin() + sz(dst) * sz(t.padded_cols));
    out.g_idx[sz(dst)] = t.g_idx[k];
  }
  return out;
}

}  // namespace epk::layouts::detail
