#include "codec/layouts/quant_tensor.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "codec/common/bytes.h"
#include "codec/common/half.h"

namespace epk::layouts {
namespace {

Error invalid(const std::string& what) { return make_error(ErrorCode::kInvalidArgument, "quant tensor: " + what); }

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

}  // namespace

Status validate(const QuantTensor& t) {
  if (t.bits < 1 || t.bits > 8) return invalid("bits " + std::to_string(t.bits) + " outside 1..8");
  if (t.rows < 0 || t.cols < 0 || t.padded_rows < t.rows || t.padded_cols < t.cols) {
    return invalid("sizes [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "] padded to [" +
                   std::to_string(t.padded_rows) + ", " + std::to_string(t.padded_cols) + "]");
  }
  if (t.group_size < 1) return invalid("group_size " + std::to_string(t.group_size));
  if (t.num_groups < 0 || (t.padded_rows > 0 && t.num_groups < 1)) {
    return invalid("num_groups " + std::to_string(t.num_groups));
  }
  if (t.scale_dtype != DType::kF16 && t.scale_dtype != DType::kBF16 && t.scale_dtype != DType::kF32) {
    return invalid("scale dtype " + std::string(dtype_name(t.scale_dtype)));
  }
  std::uint64_t n_codes = 0, n_groups = 0;
  if (!checked_mul(sz(t.padded_rows), sz(t.padded_cols), &n_codes) || t.codes.size() != n_codes) {
    return invalid("codes has " + std::to_string(t.codes.size()) + " entries");
  }
  if (!checked_mul(sz(t.num_groups), sz(t.padded_cols), &n_groups) || t.scales.size() != n_groups ||
      t.zeros.size() != n_groups) {
    return invalid("scales/zeros have " + std::to_string(t.scales.size()) + "/" + std::to_string(t.zeros.size()) +
                   " entries, expected " + std::to_string(n_groups));
  }
  if (t.g_idx.size() != sz(t.padded_rows)) return invalid("g_idx has " + std::to_string(t.g_idx.size()) + " entries");
  const std::int32_t max_code = (1 << t.bits) - 1;
  std::uint8_t all = 0;
  for (std::uint8_t c : t.codes) all |= c;
  if (all > max_code) return invalid("a code exceeds " + std::to_string(t.bits) + " bits");
  for (std::size_t i = 0; i < t.zeros.size(); ++i) {
    if (t.zeros[i] < 0 || t.zeros[i] > max_code) {
      return invalid("zeros[" + std::to_string(i) + "] = " + std::to_string(t.zeros[i]) + " outside 0.." +
                     std::to_string(max_code));
    }
  }
  for (std::size_t k = 0; k < t.g_idx.size(); ++k) {
    if (t.g_idx[k] < 0 || t.g_idx[k] >= t.num_groups) {
      return invalid("g_idx[" + std::to_string(k) + "] = " + std::to_string(t.g_idx[k]) + " outside 0.." +
                     std::to_string(t.num_groups - 1));
    }
  }
  if (!t.perm.empty()) {
    // A row-parallel shard keeps the global feature indices of its rows, so perm need not cover 0..rows-1; it must
    // name distinct, non-negative features.
    if (t.perm.size() != sz(t.padded_rows)) return invalid("perm has " + std::to_string(t.perm.size()) + " entries");
    std::vector<std::int32_t> sorted = t.perm;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() < 0) return invalid("perm has a negative entry " + std::to_string(sorted.front()));
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) return invalid("perm names feature " + std::to_string(*dup) + " twice");
  }
  return {};
}

QuantTensor make_quant_tensor(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group_size,
                              DType scale_dtype) {
  QuantTensor t;
  t.bits = bits;
  t.rows = t.padded_rows = rows;
  t.cols = t.padded_cols = cols;
  t.group_size = group_size <= 0 ? std::max<std::int64_t>(rows, 1) : group_size;
  t.num_groups = rows == 0 ? 0 : (rows + t.group_size - 1) / t.group_size;
  t.scale_dtype = scale_dtype;
  t.codes.assign(sz(rows * cols), 0);
  t.scales.assign(sz(t.num_groups * cols), 0.0f);
  t.zeros.assign(sz(t.num_groups * cols), 0);
  t.g_idx.resize(sz(rows));
  for (std::int64_t k = 0; k < rows; ++k) t.g_idx[sz(k)] = static_cast<std::int32_t>(k / t.group_size);
  return t;
}

bool has_static_groups(const QuantTensor& t) {
  for (std::int64_t k = 0; k < t.padded_rows; ++k) {
    if (t.g_idx[sz(k)] != k / t.group_size) return false;
  }
  return true;
}

bool is_symmetric(const QuantTensor& t) {
  const std::int32_t mid = 1 << (t.bits - 1);
  return std::all_of(t.zeros.begin(), t.zeros.end(), [mid](std::int32_t z) { return z == mid; });
}

Status pad_to(QuantTensor& t, std::int64_t row_multiple, std::int64_t col_multiple) {
  EPK_TRY(validate(t));
  if (row_multiple < 1 || col_multiple < 1) return invalid("pad multiples must be >= 1");
  const std::int64_t new_rows = static_cast<std::int64_t>(align_up(sz(t.padded_rows), sz(row_multiple)));
  const std::int64_t new_cols = static_cast<std::int64_t>(align_up(sz(t.padded_cols), sz(col_multiple)));
  if (new_rows == t.padded_rows && new_cols == t.padded_cols) return {};
  std::int64_t new_groups = t.num_groups;
  for (std::int64_t k = t.padded_rows; k < new_rows; ++k) new_groups = std::max(new_groups, k / t.group_size + 1);
  const std::int32_t mid = 1 << (t.bits - 1);

  // New groups and columns: scale 0 and a mid-range zero, so any code there dequantizes to 0 and v1 can store it.
  std::vector<float> scales(sz(new_groups * new_cols), 0.0f);
  std::vector<std::int32_t> zeros(sz(new_groups * new_cols), mid);
  for (std::int64_t g = 0; g < t.num_groups; ++g) {
    std::copy_n(t.scales.begin() + g * t.padded_cols, t.padded_cols, scales.begin() + g * new_cols);
    std::copy_n(t.zeros.begin() + g * t.padded_cols, t.padded_cols, zeros.begin() + g * new_cols);
  }
  std::vector<std::int32_t> g_idx = t.g_idx;
  for (std::int64_t k = t.padded_rows; k < new_rows; ++k) g_idx.push_back(static_cast<std::int32_t>(k / t.group_size));
  std::vector<std::uint8_t> codes(sz(new_rows * new_cols));
  for (std::int64_t k = 0; k < new_rows; ++k) {
    const std::int32_t g = g_idx[sz(k)];
    for (std::int64_t n = 0; n < new_cols; ++n) {
      const bool old = k < t.padded_rows && n < t.padded_cols;
      codes[sz(k * new_cols + n)] =
          old ? t.codes[sz(k * t.padded_cols + n)] : static_cast<std::uint8_t>(zeros[sz(g * new_cols + n)]);
    }
  }
  if (!t.perm.empty()) {
    for (std::int64_t k = t.padded_rows; k < new_rows; ++k) t.perm.push_back(static_cast<std::int32_t>(k));
  }
  t.codes = std::move(codes);
  t.scales = std::move(scales);
  t.zeros = std::move(zeros);
  t.g_idx = std::move(g_idx);
  t.padded_rows = new_rows;
  t.padded_cols = new_cols;
  t.num_groups = new_groups;
  return {};
}

Result<QuantTensor> sort_groups(const QuantTensor& t) {
  EPK_TRY(validate(t));
  std::vector<std::int32_t> order(sz(t.padded_rows));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return t.g_idx[sz(a)] < t.g_idx[sz(b)]; });
  QuantTensor out = t;
  out.perm.resize(order.size());
  for (std::size_t j = 0; j < order.size(); ++j) {
    const std::size_t src = sz(order[j]);
    std::copy_n(t.codes.begin() + src * sz(t.padded_cols), t.padded_cols, out.codes.begin() + j * sz(t.padded_cols));
    out.g_idx[j] = t.g_idx[src];
    out.perm[j] = t.perm.empty() ? order[j] : t.perm[src];
  }
  // Only the logical rows may move; a padded row sorted into the logical range would be sliced away wrongly.
  for (std::int64_t j = 0; j < t.rows; ++j) {
    if (order[sz(j)] >= t.rows) return invalid("sort_groups: a padding row sorts into the logical rows");
  }
  return out;
}

Result<QuantTensor> slice_rows(const QuantTensor& t, std::int64_t begin, std::int64_t end) {
  EPK_TRY(validate(t));
  if (begin < 0 || end < begin || end > t.rows) {
    return invalid("slice_rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside 0.." +
                   std::to_string(t.rows));
  }
  QuantTensor out = t;
  out.rows = out.padded_rows = end - begin;
  out.codes.assign(t.codes.begin() + begin * t.padded_cols, t.codes.begin() + end * t.padded_cols);
  out.g_idx.assign(t.g_idx.begin() + begin, t.g_idx.begin() + end);
  out.perm.resize(sz(end - begin));
  for (std::int64_t k = begin; k < end; ++k) {
    out.perm[sz(k - begin)] = t.perm.empty() ? static_cast<std::int32_t>(k) : t.perm[sz(k)];
  }
  return out;
}

std::vector<float> dequantize_f32(const QuantTensor& t) {
  std::vector<float> w(sz(t.rows * t.cols));
  for (std::int64_t k = 0; k < t.rows; ++k) {
    const std::size_t g = sz(t.g_idx[sz(k)]) * sz(t.padded_cols);
    const std::uint8_t* q = t.codes.data() + k * t.padded_cols;
    float* out = w.data() + k * t.cols;
    for (std::int64_t n = 0; n < t.cols; ++n) {
      out[n] = t.scales[g + sz(n)] * static_cast<float>(static_cast<std::int32_t>(q[n]) - t.zeros[g + sz(n)]);
    }
  }
  return w;
}

std::vector<std::uint16_t> dequantize_bf16(const QuantTensor& t) {
  std::vector<float> w = dequantize_f32(t);
  std::vector<std::uint16_t> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = f32_to_bf16(w[i]);
  return out;
}

std::vector<std::uint16_t> dequantize_f16(const QuantTensor& t) {
  std::vector<float> w = dequantize_f32(t);
  std::vector<std::uint16_t> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = f32_to_f16(w[i]);
  return out;
}

std::vector<double> matvec(const QuantTensor& t, std::span<const float> x) {
  std::vector<float> w = dequantize_f32(t);
  std::vector<double> y(sz(t.cols), 0.0);
  for (std::int64_t k = 0; k < t.rows; ++k) {
    const double xk = x[t.perm.empty() ? sz(k) : sz(t.perm[sz(k)])];
    for (std::int64_t n = 0; n < t.cols; ++n) y[sz(n)] += xk * w[sz(k * t.cols + n)];
  }
  return y;
}

}  // namespace epk::layouts
