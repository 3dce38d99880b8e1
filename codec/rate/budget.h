// Per-layer rates from a total budget (beyond the paper, which set its mix by hand): choose each layer's target so
// that the total bits meet budget_bpp * sum(weights) and the total modelled error is smallest.
//
// Model: at the rates EntroPack works at, a layer's squared weight error is about energy_i * k * 2^(-2 R_i) (each
// extra bit quarters it; k is the same for every layer since rows are normalised). The error priced is that times
// the layer's gain_i: 1 prices the weight error itself; an output-error model (codec/rate/output_error.h) gives the
// factor by which the layer's inputs turn weight error into output error. Equal marginal returns then give
// R_i = c + 0.5 * log2(gain_i * energy_i / weights_i): a layer whose weights are larger on average, or whose error
// costs more, gets more bits. c is found by bisection with every R_i clamped to [min_bpp, max_bpp], so the clamped
// solution still spends the budget (or all it can). The gains only matter relative to each other: scaling every
// gain by one factor shifts c and leaves the rates as they were (up to the bisection's rounding).
#pragma once

#include <cstdint>
#include <vector>

#include "codec/common/result.h"

namespace epk::rate {

struct LayerStats {
  std::uint64_t weights = 0;  // element count
  double energy = 0.0;        // sum of squared weights
  double gain = 1.0;          // output error per unit of weight error (1: the weight error is what is priced)
};

struct BudgetOptions {
  double budget_bpp = 4.0;  // bits per weight over all layers together
  double min_bpp = 1.0;
  double max_bpp = 8.0;
};

// One target per layer, in the order given. Errors: no layers, a layer without weights, a gain that is not finite
// and >= 0, min > max, or a budget outside [min_bpp, max_bpp].
Result<std::vector<double>> allocate_budget(const std::vector<LayerStats>& layers, const BudgetOptions& options);

}  // namespace epk::rate
