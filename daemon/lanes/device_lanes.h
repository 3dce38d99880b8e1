// epkd's pools, one "lane" each: a device lane per served CUDA device (its DevicePool, its GpuBackend with the
// device's stream, event ring and resident tier, its own Cache with the device's budget, and a one-worker scheduler
// feeding that stream), or, where no device is usable (or --cpu), one host lane (memfd pool, cache; decodes go to the
// service's CPU thread pool). Every trust domain (DomainSpec; domain 0 is the default) has such a set of lanes of its
// own. Lane i is pool i: its cache hands out handles whose top bits are i (shm::kHandlePoolShift), so a release finds
// its lane from the handle alone; a client's hello lists the pools of its domain only, with their pool ids.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "codec/common/result.h"
#include "daemon/cache/cache.h"
#include "daemon/config/config.h"
#include "daemon/lanes/decode_scheduler.h"
#include "daemon/lanes/gpu_backend.h"
#include "shm/pool.h"
#include "shm/protocol.h"

namespace epk::daemon {

struct Lane {
  std::uint32_t pool_id = 0;
  std::uint32_t domain = 0;       // the trust domain whose clients alone receive this pool
  std::uint32_t first_event = 0;  // its ring's first index in its domain's hello event list (device lanes)
  std::unique_ptr<shm::Pool> pool;
  std::unique_ptr<GpuBackend> gpu;  // null on a host lane
  std::unique_ptr<Cache> cache;
  std::unique_ptr<DecodeScheduler> gpu_scheduler;  // last: its worker joins before the backend it uses goes

  bool on_device() const { return gpu != nullptr; }
  // The device an acquire names to reach this lane (a host lane answers device 0).
  std::uint32_t served_device() const { return gpu ? static_cast<std::uint32_t>(gpu->device()) : 0; }
  // The acquire reply's done_event for a slot of this lane: an index into the concatenated rings.
  std::uint32_t event_for(std::uint64_t slot_id) const {
    return gpu ? first_event + gpu->event_for(slot_id) : shm::kNoEvent;
  }
};

// The decode-done ring length per device when `devices` devices are served (the hello's list holds at most
// shm::kMaxEvents in all).
std::uint32_t ring_events_per_device(std::size_t devices);

// The first slot id of lane `pool_id`'s cache.
inline std::uint64_t first_handle_of_pool(std::uint32_t pool_id) {
  return (std::uint64_t{pool_id} << shm::kHandlePoolShift) + 1;
}

// Sets up the lanes for `cfg`, domain by domain (the default, then cfg.domains): where cfg.serving is kAuto, a device
// lane for every usable device (cfg.devices, or all the driver reports); a device that fails setup is logged and
// skipped. No device lane in a domain: one host lane for it. A domain beyond kMaxPools' room is refused. An error
// only when a host pool cannot be made either.
Result<std::vector<Lane>> make_lanes(const DaemonConfig& cfg);

// The lane an acquire or prefetch of a client in `domain` naming `device` goes to; null when that device is not
// served.
Lane* lane_for_device(std::vector<Lane>& lanes, std::uint32_t domain, std::uint32_t device);

}  // namespace epk::daemon
