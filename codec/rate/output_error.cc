#include "codec/rate/output_error.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/rate/cholesky.h"
#include "codec/rate/feedback.h"

namespace epk::rate {

Result<double> calibrated_output_gain(const HessianView& h, std::string_view name, int threads) {
  const std::size_t n = h.cols;
  if (n == 0 || !(h.tokens > 0.0))
    return make_error(ErrorCode::kInvalidArgument, "tensor '" + std::string(name) + "': empty statistics");
  std::vector<std::uint8_t> dead;
  double damp = 0.0;
  const std::vector<std::uint32_t> order = block_order(h);
  std::vector<double> a = damped_reversed_hessian(h, order, dead, damp);
  if (cholesky_lower_blocked(a.data(), n, threads) != n) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tensor '" + std::string(name) + "': its hessian is not positive definite after damping");
  }
  // A's index i is processing position n-1-i, so the later positions come first in A and, for the block at
  // positions [b0, e), the diagonal block L_BB of A's factor over B = [n-e, n-b0) gives S_b = L_BB L_BB^T (the
  // block given the blocks rounded after it): tr(S_b) is the sum of its squares.
  double sum = 0.0;
  for (std::size_t b0 = 0; b0 < n; b0 += 8) {
    const std::size_t e = std::min(b0 + 8, n);
    for (std::size_t i = n - e; i < n - b0; ++i) {
      if (dead[order_column(order, n - 1 - i)]) continue;
      for (std::size_t j = n - e; j <= i; ++j) sum += a[i * n + j] * a[i * n + j];
    }
  }
  return sum / (double(n) * h.tokens);
}

}  // namespace epk::rate
