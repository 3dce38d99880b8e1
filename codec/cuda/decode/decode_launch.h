// Internal: the CUDA-runtime side of the decoder that the host planner needs (device limits, occupancy). Defined in
// decode_launch.cu; tests/codec/cuda/plan_host_test.cc gives the planner a device of its own instead.
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
// The kernel that decodes a plan: the lean kernel where lean_pb != 0 (it is kLeanProbBits then; lean_bf16: its
// bf16-only store), else the general kernel for lut_mode (a LutMode); each in the block shape that holds `warps`
// warps per block.
struct KernelChoice {
  int lut_mode = 0;
  int lean_pb = 0;
  bool lean_bf16 = false;
  int warps = 1;
};
// Resident blocks per SM of that kernel with `dynamic_shared` bytes of dynamic shared memory (0 if it cannot run).
Result<int> blocks_per_sm(const KernelChoice& kernel, std::size_t dynamic_shared);

}  // namespace epk::cuda::detail
