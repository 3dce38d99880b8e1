// Where a model's lattice-rans decode inputs sit in one device region: the compressed tier that epkd uploads once
// per device and that a client decoding in its own CUDA context maps (client-side decode, docs/ARCHITECTURE.md).
// epkd writes the region and libepk reads it, each computing the placement with this one function from its own view
// of the same .epk file, so no table of offsets travels on the wire. Host code only (no CUDA headers).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "codec/common/device_address.h"
#include "codec/cuda/decode/decode.h"

namespace epk::cuda {

// Byte offsets from the region's base. payload starts 256-aligned and is followed by kTierPayloadPad zero bytes: the
// decoder reads it in 16-byte chunks up to 8 words past its end (DeviceBuffers).
struct TierPlacement {
  std::uint64_t payload = 0, offsets = 0, states = 0, scales = 0;
};
inline constexpr std::uint64_t kTierPayloadPad = 32;
inline constexpr std::uint64_t kTierAlign = 256;

struct TierLayout {
  std::vector<std::optional<TierPlacement>> tensors;  // per tensor of the model; nullopt: not in the tier
  std::uint64_t bytes = 0;                            // the region's size (0: nothing to place)
};

// `streams[i]`: tensor i's validated view, or nullptr for a tensor the tier does not hold. Bytes between and after
// the buffers are zero in the region (the writer fills it with zeros first).
TierLayout tier_layout(std::span<const rans::LatticeRansStream* const> streams);

// Tensor `placement`'s buffers in the region at `base`.
DeviceBuffers tier_buffers(DeviceAddress base, const TierPlacement& placement);

}  // namespace epk::cuda
