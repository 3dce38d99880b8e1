// The logical quantized tensor every integer layout converts through (GPTQ, AWQ, Marlin, compressed-tensors; the
// .epk `intq` encoding stores this form). Conventions:
//   - codes[k, n] is the unsigned b-bit code of input feature k, output feature n: the [K, N] orientation of GPTQ,
//     i.e. the transpose of nn.Linear.weight. Row-major, one byte per code.
//   - w[k, n] = scales[g, n] * (codes[k, n] - zeros[g, n]) with g = g_idx[k]: every format's zero convention (GPTQ
//     v1's stored z-1, compressed-tensors' signed values, symmetric formats' implied 2^(b-1)) is normalised to this.
//   - perm, when not empty, says which input feature each row holds: row k multiplies activation x[perm[k]]. A
//     conversion that reorders K (act-order into a layout without g_idx) records it here; the caller must gather the
//     activations through it (x' = x[perm]) or the matmul is wrong although every value is intact.
//   - codes/scales/zeros/g_idx are stored at the padded size; `rows`/`cols` are the logical size, and dequantize
//     returns only that. Padded codes equal their zero and padded groups have scale 0, so padding dequantizes to 0.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/common/dtype.h"
#include "codec/common/result.h"

namespace epk::layouts {

struct QuantTensor {
  int bits = 4;                     // 1..8
  std::int64_t rows = 0;            // K, logical (in_features)
  std::int64_t cols = 0;            // N, logical (out_features)
  std::int64_t padded_rows = 0;     // storage extent of codes/g_idx, >= rows
  std::int64_t padded_cols = 0;     // storage extent of codes/scales/zeros, >= cols
  std::int64_t group_size = 0;      // G (a checkpoint's -1 becomes padded_rows)
  std::int64_t num_groups = 0;      // rows of scales/zeros
  DType scale_dtype = DType::kF16;  // what the source stored; writers round scales to it (exact for data read here)

  std::vector<std::uint8_t> codes;   // [padded_rows, padded_cols]
  std::vector<float> scales;         // [num_groups, padded_cols]
  std::vector<std::int32_t> zeros;   // [num_groups, padded_cols]
  std::vector<std::int32_t> g_idx;   // [padded_rows], each in [0, num_groups)
  std::vector<std::int32_t> perm;    // empty (identity) or [padded_rows]: distinct input features (a permutation,
                                     // or a row-parallel shard's global feature indices)

  std::uint8_t code(std::int64_t k, std::int64_t n) const { return codes[k * padded_cols + n]; }
  std::int32_t group_of(std::int64_t k) const { return g_idx[k]; }
};

// Every size, range and invariant above; kInvalidArgument naming the field. Readers return only valid tensors.
Status validate(const QuantTensor& t);

// A tensor with static groups (g_idx[k] = k / G), no perm, zero-filled; callers fill codes/scales/zeros.
QuantTensor make_quant_tensor(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group_size,
                              DType scale_dtype = DType::kF16);

// True when g_idx[k] == k / group_size for every row (groups contiguous and in order).
bool has_static_groups(const QuantTensor& t);
// True when every zero is 2^(bits-1) (the symmetric uint4b8 / uint8b128 convention Marlin and CT-symmetric assume).
bool is_symmetric(const QuantTensor& t);

// Pads storage to multiples of row_multiple / col_multiple (logical sizes unchanged). New rows continue the static
// group numbering (k / G), adding groups as needed; new rows and columns dequantize to exactly 0.
Status pad_to(QuantTensor& t, std::int64_t row_multiple, std::int64_t col_multiple);

// Reorders rows so groups are contiguous (stable sort by g_idx), for layouts without g_idx. The returned tensor has
// g_idx[k] == k / G when the source groups all have G members (GPTQ act-order), and perm composed so that row k still
// multiplies activation x[perm[k]]. Dequantized rows move with it; nothing is requantized.
Result<QuantTensor> sort_groups(const QuantTensor& t);

// Rows [begin, end) of the logical rows, as a tensor-parallel row shard: codes, g_idx and the scale/zero groups stay
// as they are (act-order groups are scattered across K, so a shard may touch any group), and perm becomes the global
// feature index of each row, so the shard's matvec against the full activation vector is its partial sum. Dropping
// that index (slicing codes alone) is the act-order sharding bug. The source must have no row padding inside range.
Result<QuantTensor> slice_rows(const QuantTensor& t, std::int64_t begin, std::int64_t end);

// w as float32, logical [rows, cols] row-major, in stored row order (apply perm to the activations, not here).
// Exact: a f16/bf16 scale times an integer of at most 9 bits fits float32's 24-bit significand.
std::vector<float> dequantize_f32(const QuantTensor& t);
// The same values rounded to bf16 / fp16 with round-to-nearest-even from the exact float32 product; this equals
// torch's `scales * (q - z)` computed in that dtype (one rounding of the exact product).
std::vector<std::uint16_t> dequantize_bf16(const QuantTensor& t);
std::vector<std::uint16_t> dequantize_f16(const QuantTensor& t);

// y[n] = sum_k x[perm[k]] * w[k, n] in double over logical rows (a test helper for act-order conversions; x has the
// original feature order).
std::vector<double> matvec(const QuantTensor& t, std::span<const float> x);

}  // namespace epk::layouts
