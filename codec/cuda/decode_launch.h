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
// lean_pb: the lean kernel for that prob_bits (0: not lean), lean_bf16 its bf16-only form (DecodePlan::lean_pb);
// ws: its warp-specialised form (threads then counts decode and reconstruction warps).
Result<int> blocks_per_sm(int lut_mode, bool staged, bool shfl, int fast, int threads, std::size_t dynamic_shared,
                          int lean_pb = 0, bool lean_bf16 = false, bool ws = false);
// Whether a lean kernel is built for this prob_bits.
bool lean_supported(int prob_bits);

}  // namespace epk::cuda::detail
