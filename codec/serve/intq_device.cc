#include "codec/serve/intq_device.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "codec/layouts/convert.h"
#include "codec/serve/intq_producer.h"

namespace epk::serve {
namespace {

// sort_groups' refusal, computed as it does: the stable order of the rows by group moves a padding row into the
// logical rows.
bool padding_sorts_inside(const layouts::QuantTensor& q) {
  std::vector<std::int32_t> order(q.g_idx.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return q.g_idx[static_cast<std::size_t>(a)] < q.g_idx[static_cast<std::size_t>(b)];
  });
  for (std::int64_t j = 0; j < q.rows && j < static_cast<std::int64_t>(order.size()); ++j) {
    if (order[static_cast<std::size_t>(j)] >= q.rows) return true;
  }
  return false;
}

}  // namespace

IntqKernelTraits intq_kernel_traits(const layouts::QuantTensor& q) {
  IntqKernelTraits v;
  v.padded_rows = q.padded_rows;
  v.padded_cols = q.padded_cols;
  v.num_groups = q.num_groups;
  v.static_groups = layouts::has_static_groups(q);
  v.has_perm = !q.perm.empty();
  v.zero_point_zero = std::any_of(q.zeros.begin(), q.zeros.end(), [](std::int32_t z) { return z == 0; });
  v.padding_sorts_inside = !v.static_groups && padding_sorts_inside(q);
  return v;
}

bool intq_kernels_write(const IntqKernelTraits& v, Layout layout, const PackedGeometry& g) {
  if (static_cast<std::uint64_t>(v.num_groups) != g.num_groups) return false;
  const bool act_order = !v.static_groups || v.has_perm;
  switch (layout) {
    case Layout::kGptq: return !v.zero_point_zero;
    case Layout::kGptqV2: return true;
    case Layout::kAwq: return !act_order;
    case Layout::kMarlin:
      return ((g.flags & kPackedGIdx) != 0) == act_order && !(act_order && v.padding_sorts_inside);
    default: return false;
  }
}

std::optional<DType> intq_kernel_dense(Layout layout, DType index) {
  switch (layout) {
    case Layout::kDenseBF16: return DType::kBF16;
    case Layout::kDenseF16: return DType::kF16;
    case Layout::kStored:
      if (index == DType::kBF16 || index == DType::kF16) return index;
      return std::nullopt;
    default: return std::nullopt;
  }
}

Status pad_for_layout(layouts::QuantTensor& q, Layout layout) {
  std::int64_t rm = 1, cm = 1;
  layouts::layout_alignment(target_of(layout), q, &rm, &cm);
  return layouts::pad_to(q, rm, cm);
}

}  // namespace epk::serve
