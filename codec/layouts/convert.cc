#include "codec/layouts/convert.h"

#include <numeric>

#include "codec/layouts/awq.h"
#include "codec/layouts/awq_gemv.h"
#include "codec/layouts/compressed_tensors.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/marlin.h"

namespace epk::layouts {

std::optional<Layout> layout_from_name(std::string_view name) {
  if (name == "gptq") return Layout::kGptqV1;
  if (name == "gptq-v2") return Layout::kGptqV2;
  if (name == "awq") return Layout::kAwq;
  if (name == "marlin") return Layout::kMarlin;
  if (name == "ct") return Layout::kCompressedTensors;
  if (name == "awq-gemv") return Layout::kAwqGemv;
  return std::nullopt;
}

std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::kGptqV1: return "gptq";
    case Layout::kGptqV2: return "gptq-v2";
    case Layout::kAwq: return "awq";
    case Layout::kMarlin: return "marlin";
    case Layout::kCompressedTensors: return "ct";
    case Layout::kAwqGemv: return "awq-gemv";
  }
  return "?";
}

void layout_alignment(Layout target, const QuantTensor& t, std::int64_t* row_multiple, std::int64_t* col_multiple) {
  const std::int64_t word = 32 / std::gcd(32, t.bits);  // values per whole number of words
  switch (target) {
    case Layout::kGptqV1:
    case Layout::kGptqV2: *row_multiple = word; *col_multiple = word; break;
    case Layout::kAwq: *row_multiple = t.group_size; *col_multiple = 8; break;
    case Layout::kMarlin: *row_multiple = 16; *col_multiple = 64; break;
    case Layout::kCompressedTensors: *row_multiple = 1; *col_multiple = 1; break;
    case Layout::kAwqGemv: *row_multiple = std::lcm(t.group_size, std::int64_t{8}); *col_multiple = 8; break;
  }
}

Result<Converted> write_layout(const QuantTensor& src, Layout target) {
  EPK_TRY(validate(src));
  QuantTensor t = src;
  std::int64_t rm = 1, cm = 1;
  layout_alignment(target, t, &rm, &cm);
  const bool no_g_idx = target == Layout::kAwq || target == Layout::kAwqGemv;
  if (no_g_idx && !has_static_groups(t)) {
    EPK_TRY_ASSIGN(t, sort_groups(t));
  }
  EPK_TRY(pad_to(t, rm, cm));
  Converted out;
  Result<std::vector<Tensor>> written = [&]() -> Result<std::vector<Tensor>> {
    switch (target) {
      case Layout::kGptqV1: return write_gptq(t, GptqZeros::kV1);
      case Layout::kGptqV2: return write_gptq(t, GptqZeros::kV2);
      case Layout::kAwq: return write_awq(t);
      case Layout::kMarlin: return write_marlin(t);
      case Layout::kCompressedTensors: return write_compressed_tensors(t, CtPacking::kDense);
      case Layout::kAwqGemv: return write_awq_gemv(t);
    }
    return make_error(ErrorCode::kInternal, "write_layout: unknown layout");
  }();
  if (!written) return std::move(written).error();
  out.tensors = std::move(written).value();
  if (no_g_idx) out.activation_perm = t.perm;
  out.rows = t.rows;
  out.cols = t.cols;
  out.padded_rows = t.padded_rows;
  out.padded_cols = t.padded_cols;
  return out;
}

}  // namespace epk::layouts
