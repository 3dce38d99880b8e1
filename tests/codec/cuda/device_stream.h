// A stored lattice-rans tensor copied to the device, in the form cuda::DeviceBuffers describes (payload padded to a
// whole 16-byte chunk).
#pragma once

#include "codec/cuda/decode/decode.h"
#include "codec/rans/stream.h"
#include "tests/codec/cuda/device_buffer.h"

namespace epk::testing {

struct DeviceStream {
  DeviceBuffer payload, offsets, states, scales;

  explicit DeviceStream(const rans::LatticeRansStream& s)
      : payload(DeviceBuffer::from_host(s.payload.data(), s.payload.size_bytes(), (s.payload.size() + 8) / 8 * 16)),
        offsets(DeviceBuffer::from_host(s.offsets.data(), s.offsets.size_bytes())),
        states(DeviceBuffer::from_host(s.states.data(), s.states.size_bytes())),
        scales(DeviceBuffer::from_host(s.scales.data(), s.scales.size_bytes())) {}

  cuda::DeviceBuffers buffers() const {
    return {payload.get<const std::uint16_t>(), offsets.get<const std::uint32_t>(),
            states.get<const std::uint32_t>(), scales.get<const float>()};
  }
};

}  // namespace epk::testing
