#include "codec/cuda/decode/tier_layout.h"

#include "codec/common/bytes.h"

namespace epk::cuda {
namespace {

std::uint64_t align_up(std::uint64_t v) { return epk::align_up(v, kTierAlign); }

}  // namespace

TierLayout tier_layout(std::span<const rans::LatticeRansStream* const> streams) {
  TierLayout out;
  out.tensors.resize(streams.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const rans::LatticeRansStream* s = streams[i];
    if (s == nullptr) continue;
    TierPlacement p;
    p.payload = align_up(at);
    p.offsets = align_up(p.payload + s->payload.size_bytes() + kTierPayloadPad);
    p.states = align_up(p.offsets + s->offsets.size_bytes());
    p.scales = align_up(p.states + s->states.size_bytes());
    at = p.scales + s->scales.size_bytes();
    out.tensors[i] = p;
  }
  out.bytes = at == 0 ? 0 : align_up(at);
  return out;
}

DeviceBuffers tier_buffers(DeviceAddress base, const TierPlacement& p) {
  return {(base + p.payload).as<const std::uint16_t>(), (base + p.offsets).as<const std::uint32_t>(),
          (base + p.states).as<const std::uint32_t>(), (base + p.scales).as<const float>()};
}

}  // namespace epk::cuda
