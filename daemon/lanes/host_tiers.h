// Models' host tiers for epkd's device lanes (shm/host_tier.h): a lane whose tier budget (tier_budget_mb) leaves no
// room for a model's compressed tier keeps it in host memory and decodes from it on the GPU, each decode first
// copying its tensor's compressed bytes to the device (serve::DeviceTier::bind_host). One host tier per model, shared
// by every lane that keeps the model there and by every client that decodes it itself (open_stored passes its fd):
// made by the first lane that needs it (the model's stored buffers checksummed and copied on several threads: the
// cold start reads the file with as many), page-locked with the driver once (portable: every device's context copies
// from it at full speed), freed once no lane holds it (clients keep their own maps). CUDA builds only.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "codec/common/result.h"
#include "codec/serve/device_tier.h"
#include "daemon/sources/model_source.h"
#include "shm/cuda_event.h"
#include "shm/host_tier.h"

namespace epk::daemon {

struct HostTier {
  shm::HostTierMemory memory;  // sealed
  // Empty where the driver refused the registration (said in the log): copies then run from pageable memory.
  shm::HostRegistration registration;
};

class HostTiers {
 public:
  // `threads`: how many check and copy a tier's tensors (at least 1).
  explicit HostTiers(int threads) : threads_(threads < 1 ? 1 : threads) {}

  // Model `model_id`'s host tier, laid out as `placement` (a DeviceTier of the model's producers) and filled from
  // `src` (each tensor checked by verify_stored first), registered on `device`; the one made before if it still lives.
  Result<std::shared_ptr<const HostTier>> get(std::uint32_t model_id, const serve::DeviceTier& placement,
                                              const ModelSource& src, int device);

 private:
  const int threads_;
  std::mutex mu_;  // held while a tier is made: two lanes adding one model make it once
  std::unordered_map<std::uint32_t, std::weak_ptr<const HostTier>> tiers_;
};

}  // namespace epk::daemon
