// Builds without the CUDA toolkit: no GPU path; epkd serves host pools.
#include "daemon/lanes/gpu_backend.h"

namespace epk::daemon {

int gpu_device_count() { return 0; }
bool gpu_device_present(int) { return false; }

std::shared_ptr<HostTiers> make_host_tiers(int) { return nullptr; }

Result<GpuSetup> make_gpu_setup(int, std::uint64_t, std::uint32_t, std::uint64_t, std::shared_ptr<HostTiers>) {
  return make_error(ErrorCode::kUnsupported, "this build of epkd has no CUDA");
}

}  // namespace epk::daemon
