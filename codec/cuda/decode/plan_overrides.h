// Internal: plan choices that the tests force, so that every kernel, table placement and work split runs on small
// tensors and on the same stream (DecodePlan::create without overrides takes the defaults). None changes an output
// bit: each forced plan is compared with the CPU oracle like the default one.
#pragma once

#include <cstdint>

namespace epk::cuda::detail {

struct PlanOverrides {
  int lut_mode = -1;                      // -1: the first placement that holds the batch; else a LutMode (the plan
                                          // fails with kUnsupported where that placement cannot hold it)
  bool lean = true;                       // false: the general kernel even where the lean one applies
  std::uint32_t max_warps_per_block = 32;
  std::uint32_t min_tiles_per_block = 1;  // tiles per block at least (the work split otherwise spreads the tiles
                                          // over every SM, one per block for small tensors)
};

}  // namespace epk::cuda::detail
