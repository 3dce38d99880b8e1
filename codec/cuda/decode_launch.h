// Internal: the CUDA-runtime side of the decoder that the host planner needs (device limits, occupancy).
#pragma once

#include <cstddef>

#include "codec/common/result.h"

namespace epk::cuda::detail {

struct DeviceLimits {
  int sms = 0;
  std::size_t max_shared_per_block = 0;  // opt-in dynamic + static limit
  std::size_t max_shared_per_sm = 0;
};

Result<DeviceLimits> query_limits(int device);
// Resident blocks per SM for the kernel variant at this block size and dynamic shared memory (0 if it cannot run).
// fast: the kFast kernel level (0, 1, 2; see decode_kernel.cuh), as DecodePlan::fast_level.
Result<int> blocks_per_sm(int lut_mode, bool staged, bool shfl, int fast, int threads, std::size_t dynamic_shared);

}  // namespace epk::cuda::detail
