// Release fences: a client's promise that it no longer reads (or writes) a slot. A slot is reused only after every
// fence its last users handed back has completed. On the host path the release message itself is the fence (the
// client has finished with the memory when it sends it). A CUDA interprocess event (recorded by the client after its
// last kernel that reads the slot) becomes a second FenceKind on GPU machines.
#pragma once

#include <cstdint>

namespace epk::shm {

// Stored on the wire: never renumber.
enum class FenceKind : std::uint32_t {
  kHostRelease = 0,  // complete when the release message arrives
  kCudaEvent = 1,    // an interprocess CUDA event the client recorded after its last kernel reading the slot; a
                     // daemon side stream waits on it and a daemon marker recorded after that wait becomes the slot's
                     // Fence (daemon/cache/fence_pool.h): only that slot's reuse waits. Device pools only (a host pool
                     // answers kUnsupported).
};

class Fence {
 public:
  virtual ~Fence() = default;
  // Non-blocking: true once the client's last use of the slot is over. An error finding out is never "complete".
  virtual bool completed() const = 0;
};

class HostReleaseFence final : public Fence {
 public:
  bool completed() const override { return true; }
};

}  // namespace epk::shm
