#include "daemon/lanes/tier_placement.h"

#include <algorithm>
#include <numeric>

namespace epk::daemon {

std::optional<std::uint64_t> block_of(const std::string& name) {
  std::size_t begin = 0;
  while (begin <= name.size()) {
    std::size_t end = name.find('.', begin);
    if (end == std::string::npos) end = name.size();
    const std::size_t len = end - begin;
    // At most 18 digits: any block number a model has, never an overflow.
    if (len > 0 && len <= 18 &&
        std::all_of(name.begin() + static_cast<std::ptrdiff_t>(begin), name.begin() + static_cast<std::ptrdiff_t>(end),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      return std::stoull(name.substr(begin, len));
    }
    begin = end + 1;
  }
  return std::nullopt;
}

std::vector<bool> place_tier(const std::vector<std::string>& names, const std::vector<std::uint64_t>& footprint,
                             std::uint64_t budget) {
  const std::size_t n = std::min(names.size(), footprint.size());
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<std::optional<std::uint64_t>> block(n);
  for (std::size_t i = 0; i < n; ++i) block[i] = block_of(names[i]);
  // Outside the blocks first, then by block; within each, file order (a stable sort).
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (block[a].has_value() != block[b].has_value()) return !block[a].has_value();
    return block[a].has_value() && *block[a] < *block[b];
  });
  std::vector<bool> on_device(names.size(), false);
  std::uint64_t left = budget;
  for (std::size_t i : order) {
    if (footprint[i] == 0 || footprint[i] > left) continue;
    on_device[i] = true;
    left -= footprint[i];
  }
  return on_device;
}

}  // namespace epk::daemon
