#include "daemon/device_lanes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

namespace epk::daemon {

std::uint32_t ring_events_per_device(std::size_t devices) {
  constexpr std::uint32_t kRing = 64;
  if (devices == 0) return kRing;
  return std::clamp<std::uint32_t>(static_cast<std::uint32_t>(shm::kMaxEvents / devices), 1, kRing);
}

namespace {

std::vector<int> wanted_devices(const DaemonConfig& cfg) {
  if (!cfg.devices.empty()) return cfg.devices;
  std::vector<int> all;
  for (int d = 0; d < gpu_device_count(); ++d) all.push_back(d);
  return all;
}

}  // namespace

Result<std::vector<Lane>> make_lanes(const DaemonConfig& cfg) {
  std::vector<Lane> lanes;
  if (cfg.serving == ServingMode::kHost) {
    spdlog::info("serving mode host (--cpu): host memory pools and the CPU decoder");
  } else {
    const std::vector<int> devices = wanted_devices(cfg);
    const std::size_t n = std::min<std::size_t>(devices.size(), shm::kMaxPools);
    if (devices.size() > n) spdlog::warn("{} devices listed; serving the first {}", devices.size(), n);
    const std::uint32_t ring = ring_events_per_device(n);
    std::uint32_t events = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const int device = devices[i];
      if (!gpu_device_present(device)) {
        spdlog::warn("CUDA device {} is not present; not served", device);
        continue;
      }
      const std::uint64_t budget = budget_for_device(cfg, device);
      auto setup = make_gpu_setup(device, budget, ring);
      if (!setup) {
        spdlog::warn("CUDA device {} is present but unusable ({}); not served", device, setup.error().to_string());
        continue;
      }
      Lane lane;
      lane.pool_id = static_cast<std::uint32_t>(lanes.size());
      lane.pool = std::move(setup->pool);
      lane.gpu = std::move(setup->backend);
      lane.first_event = events;
      events += static_cast<std::uint32_t>(lane.gpu->event_handles().size());
      // Evicted ranges keep their pages (see Service): no discard hook.
      lane.cache = std::make_unique<Cache>(lane.pool->size(), nullptr, nullptr, first_handle_of_pool(lane.pool_id));
      // One worker issues everything to the device's one stream, acquire before prefetch.
      // It polls for the next job as long as the io threads do (spin_us) before it sleeps.
      lane.gpu_scheduler =
          std::make_unique<DecodeScheduler>(1, spin_us_for(cfg.spin_us, std::thread::hardware_concurrency()));
      spdlog::info("serving from a device pool on CUDA device {} (pool {}, {} MiB, {} events)", device, lane.pool_id,
                   lane.pool->size() >> 20, lane.gpu->event_handles().size());
      lanes.push_back(std::move(lane));
    }
    if (lanes.empty() && !devices.empty()) {
      spdlog::warn("no CUDA device usable; serving from host memory with the CPU decoder");
    }
  }
  if (lanes.empty()) {
    EPK_TRY_ASSIGN(std::unique_ptr<shm::HostPool> host, shm::HostPool::create("epkd-pool0", cfg.budget_bytes));
    Lane lane;
    lane.pool = std::move(host);
    lane.cache = std::make_unique<Cache>(lane.pool->size(), nullptr, nullptr, first_handle_of_pool(0));
    lanes.push_back(std::move(lane));
  }
  return lanes;
}

Lane* lane_for_device(std::vector<Lane>& lanes, std::uint32_t device) {
  for (Lane& l : lanes) {
    if (l.served_device() == device) return &l;
  }
  return nullptr;
}

}  // namespace epk::daemon
