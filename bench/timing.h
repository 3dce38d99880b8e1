// Small timing helpers shared by the acquire benches: elapsed microseconds and a percentile of a sample.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace epk::bench {

using Clock = std::chrono::steady_clock;

inline double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// The p-quantile (0..1) of v by rank (no interpolation); 0 for an empty sample.
inline double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace epk::bench
