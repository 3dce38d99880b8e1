// The output-error model of the budget allocator under calibration: the gain of codec/rate/budget.h, i.e. how much
// output error (per calibration token) a layer makes per unit of squared weight error when its weight is encoded
// with calibrated rounding (codec/rate/feedback.h).
//
// Model: at rate R the lattice quantizer leaves each 8-column block of a normalised row an error that is white with
// variance s^2 ~ rms_row^2 * 2^(-2R) per weight. Plain rounding would cost s^2 tr(H) of output error per row. Error
// feedback over the blocks in the encoder's order (block_order) compensates each block's error with the blocks
// rounded after it, leaving only what block b's inputs carry that the later blocks' inputs do not: the Schur
// complement S_b = H_bb - H_b,>b H_>b^-1 H_>b,b (">b": after b in that order). A row's output error is then
// s^2 sum_b tr(S_b), and summed over the rows energy * 2^(-2R) * gain * tokens with
//   gain = sum_b tr(S_b) / (cols * tokens).
// S_b is taken from the matrix the encoder factors (damped, dead columns fixed up: damped_reversed_hessian), so the
// model prices the objective the encoder minimises; a dead column's inputs were never seen and add nothing. With
// H = tokens * I every layer's gain is 1 + kFeedbackDamping, so the allocation is the weight-error one.
// Cost: one Cholesky factor of H (cols^3 / 3 multiply-adds), which the encoder takes again for the tensor.
#pragma once

#include <string_view>

#include "codec/common/result.h"
#include "codec/rate/calibration.h"

namespace epk::rate {

// The gain above, > 0 unless every column is dead (then 0). Deterministic for any thread count. Errors
// (kInvalidArgument naming the tensor): H not positive definite after damping, as make_feedback_factor's.
Result<double> calibrated_output_gain(const HessianView& h, std::string_view name, int threads = 1);

}  // namespace epk::rate
