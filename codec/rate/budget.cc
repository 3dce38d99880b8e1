#include "codec/rate/budget.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace epk::rate {

Result<std::vector<double>> allocate_budget(const std::vector<LayerStats>& layers, const BudgetOptions& o) {
  if (layers.empty()) return make_error(ErrorCode::kInvalidArgument, "allocate_budget: no layers");
  if (!(o.min_bpp > 0.0) || !(o.min_bpp <= o.max_bpp)) {
    return make_error(ErrorCode::kInvalidArgument, "allocate_budget: need 0 < min_bpp <= max_bpp");
  }
  if (!(o.budget_bpp >= o.min_bpp && o.budget_bpp <= o.max_bpp)) {
    return make_error(ErrorCode::kInvalidArgument, "allocate_budget: budget " + std::to_string(o.budget_bpp) +
                                                       " outside [" + std::to_string(o.min_bpp) + ", " +
                                                       std::to_string(o.max_bpp) + "]");
  }
  double total = 0.0;
  std::vector<double> offset(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].weights == 0) {
      return make_error(ErrorCode::kInvalidArgument, "allocate_budget: layer " + std::to_string(i) + " is empty");
    }
    if (!(std::isfinite(layers[i].gain) && layers[i].gain >= 0.0)) {
      return make_error(ErrorCode::kInvalidArgument,
                        "allocate_budget: layer " + std::to_string(i) + " has gain " + std::to_string(layers[i].gain));
    }
    total += double(layers[i].weights);
    // An all-zero layer (or one whose error costs nothing) takes the minimum. A gain of exactly 1 leaves the mean
    // square as it is, so the weight-error allocation is unchanged bit for bit.
    const double ms = layers[i].gain * (layers[i].energy / double(layers[i].weights));
    offset[i] = ms > 0.0 ? 0.5 * std::log2(ms) : -1e300;
  }
  auto spend = [&](double c, std::vector<double>* rates) {
    double bits = 0.0;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const double r = std::clamp(c + offset[i], o.min_bpp, o.max_bpp);
      if (rates) (*rates)[i] = r;
      bits += r * double(layers[i].weights);
    }
    return bits / total;
  };
  double lo = -2000.0;
  double hi = 2000.0;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (spend(mid, nullptr) > o.budget_bpp) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  std::vector<double> rates(layers.size());
  spend(lo, &rates);
  return rates;
}

}  // namespace epk::rate
