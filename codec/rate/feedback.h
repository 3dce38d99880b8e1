// Hessian-aware rounding of a weight's E8 vectors (GPTQ's error feedback with 8-column blocks, i.e. BlockLDLQ with
// the E8 codebook): the vectors of a row are quantized block by block, each with the encoder's nearest-point
// quantizer, and each block's error is propagated to the blocks not yet quantized so that the output error
// tr((W - Q) H (W - Q)^T) falls, H the layer's input second moments (codec/rate/calibration.h). Rows are
// independent, so the scale search's sample rows are quantized exactly as in the whole tensor.
//
// Block act-order (GPTQ's act-order at the granularity of E8 blocks): the blocks are quantized in order of
// decreasing energy, the sum of their 8 diagonal entries of H, so that the blocks whose inputs are largest are
// rounded first, while the most columns are left to absorb their error. Only the order of rounding changes: every
// vector is stored at its own block's place, so the stream format and the decoders do not see it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "codec/common/result.h"
#include "codec/lattice/quantize.h"
#include "codec/rate/calibration.h"

namespace epk::rate {

inline constexpr double kFeedbackDamping = 0.01;  // GPTQ's percdamp: a multiple of mean(diag H) on the diagonal

// The order in which the 8-column blocks are quantized: order[k] is the block (stored at columns 8 * order[k] ...)
// rounded k-th. Full blocks by decreasing sum of diag(H) over their columns, ties in stored order (so H = c * I
// keeps the natural order); a partial last block (cols not a multiple of 8) stays last, so that every full block
// keeps 8 processing positions.
std::vector<std::uint32_t> block_order(const HessianView& h);

// H's column at processing position p (block order[p / 8], lane p % 8).
inline std::size_t order_column(const std::vector<std::uint32_t>& order, std::size_t p) {
  return std::size_t(order[p / 8]) * 8 + p % 8;
}

// The factor of one H in processing order (H_P = P^T H P, P the block permutation of block_order), as GPTQ builds
// it: columns with H_ii = 0 (inputs never seen) are dead (H_ii set to 1, their weights quantized as zeros), damp =
// 0.01 * mean(diag H) is added to the diagonal, U is the upper Cholesky factor of H_P^-1, and each block's update
// rows F_b = U_bb^-1 U_b,rest are kept (the error e of the block at positions b moves the positions after it by
// -e F_b).
struct FeedbackFactor {
  std::uint32_t cols = 0;
  double damp = 0.0;
  std::vector<std::uint8_t> dead;     // per H column (stored order)
  std::vector<std::uint32_t> order;   // block_order(H)
  std::vector<float> f;               // cols x cols over processing positions, row-major: F_b after position b
  const HessianView* h = nullptr;     // the statistics the factor came from (the refit's objective)
};

// The matrix whose lower Cholesky factor make_feedback_factor takes: A = J H_P J (J the reversal: A's index i is
// processing position n-1-i, i.e. H's column order_column(order, n-1-i)), symmetrised, each dead column's diagonal
// set to 1 and damp added to the diagonal; row-major n x n, the lower triangle filled and the upper one zero. dead
// (per H column) and damp are set as FeedbackFactor's.
std::vector<double> damped_reversed_hessian(const HessianView& h, const std::vector<std::uint32_t>& order,
                                            std::vector<std::uint8_t>& dead, double& damp);

// Errors (kInvalidArgument naming the tensor): H not positive definite after damping (a Cholesky pivot <= 0).
// The same factor, bit for bit, for any thread count.
Result<FeedbackFactor> make_feedback_factor(const HessianView& h, std::string_view name, int threads = 1);

// Quantizes rows x padded_cols normalised weights at `scale` with error feedback into out (resized to rows *
// padded_cols / 8 vectors). Dead columns of x must already be zero. Deterministic for any thread count.
void quantize_feedback(const float* x, std::size_t rows, std::uint32_t padded_cols, float scale,
                       const FeedbackFactor& f, lattice::QuantizedFields& out, int threads);

// The row refit against the H-weighted objective: scales[r] = max(<x_r, p_r>_Hd / <p_r, p_r>_Hd, 1e-12) with
// Hd = H + damp * I (positive definite, so a row with a nonzero point has a finite fit), or float(scale) * rms[r]
// when every point of the row is 0. x: the source rows (padded), q their fields.
void refit_rows_h(const float* x, std::uint32_t rows, std::uint32_t padded_cols, const lattice::QuantizedFields& q,
                  double scale, const float* rms, const FeedbackFactor& f, std::vector<float>& scales, int threads);

}  // namespace epk::rate
