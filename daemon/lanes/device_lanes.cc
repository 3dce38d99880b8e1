#include "daemon/lanes/device_lanes.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

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

// A lane's cache: the pool's size as its budget, handles in the pool's range, the configured per-client quota.
std::unique_ptr<Cache> make_cache(const DaemonConfig& cfg, const Lane& lane) {
  auto cache = std::make_unique<Cache>(lane.pool->size(), nullptr, nullptr, first_handle_of_pool(lane.pool_id));
  cache->set_quota({cfg.quota_pinned_bytes, cfg.max_pins_per_tensor, cfg.uid_pinned_percent / 100.0, ::geteuid(),
                    cfg.max_slots_per_pool});
  return cache;
}

// One domain's lanes, appended to `lanes` (pool ids continue from lanes.size()). `budget_override`: the domain's own
// budget per pool, 0 for the configured ones.
Status add_domain_lanes(const DaemonConfig& cfg, std::uint32_t domain, std::uint64_t budget_override,
                        const std::shared_ptr<HostTiers>& host_tiers, std::vector<Lane>& lanes) {
  const std::size_t first_lane = lanes.size();
  const std::size_t room = shm::kMaxPools - first_lane;
  if (cfg.serving == ServingMode::kHost) {
    if (domain == 0) spdlog::info("serving mode host (--cpu): host memory pools and the CPU decoder");
  } else {
    const std::vector<int> devices = wanted_devices(cfg);
    const std::size_t n = std::min<std::size_t>(devices.size(), room);
    if (devices.size() > n) spdlog::warn("{} devices listed; serving the first {}", devices.size(), n);
    const std::uint32_t ring = ring_events_per_device(n);
    std::uint32_t events = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const int device = devices[i];
      if (!gpu_device_present(device)) {
        spdlog::warn("CUDA device {} is not present; not served", device);
        continue;
      }
      const std::uint64_t budget = budget_override != 0 ? budget_override : budget_for_device(cfg, device);
      auto setup = make_gpu_setup(device, budget, ring, tier_budget_for_device(cfg, device), host_tiers);
      if (!setup) {
        spdlog::warn("CUDA device {} is present but unusable ({}); not served", device, setup.error().to_string());
        continue;
      }
      Lane lane;
      lane.pool_id = static_cast<std::uint32_t>(lanes.size());
      lane.domain = domain;
      lane.pool = std::move(setup->pool);
      lane.gpu = std::move(setup->backend);
      lane.first_event = events;
      events += static_cast<std::uint32_t>(lane.gpu->event_handles().size());
      // Evicted ranges keep their pages (see Service): no discard hook.
      lane.cache = make_cache(cfg, lane);
      // One worker issues everything to the device's one stream, acquire before prefetch.
      // It polls for the next job as long as the io threads do (spin_us) before it sleeps.
      lane.gpu_scheduler =
          std::make_unique<DecodeScheduler>(1, spin_us_for(cfg.spin_us, std::thread::hardware_concurrency()));
      spdlog::info("serving from a device pool on CUDA device {} (pool {}, domain {}, {} MiB, {} events)", device,
                   lane.pool_id, domain, lane.pool->size() >> 20, lane.gpu->event_handles().size());
      lanes.push_back(std::move(lane));
    }
    if (lanes.size() == first_lane && !devices.empty()) {
      spdlog::warn("no CUDA device usable; serving from host memory with the CPU decoder");
    }
  }
  if (lanes.size() == first_lane) {
    const auto pool_id = static_cast<std::uint32_t>(lanes.size());
    EPK_TRY_ASSIGN(std::unique_ptr<shm::HostPool> host,
                   shm::HostPool::create("epkd-pool" + std::to_string(pool_id),
                                         budget_override != 0 ? budget_override : cfg.budget_bytes));
    Lane lane;
    lane.pool_id = pool_id;
    lane.domain = domain;
    lane.pool = std::move(host);
    lane.cache = make_cache(cfg, lane);
    lanes.push_back(std::move(lane));
  }
  return {};
}

}  // namespace

Result<std::vector<Lane>> make_lanes(const DaemonConfig& cfg) {
  std::vector<Lane> lanes;
  // Host tiers are checked on as many threads as the CPU decoder has (they run at model open, before any decode).
  const unsigned threads = cfg.threads != 0 ? cfg.threads : std::max(1u, std::thread::hardware_concurrency());
  const std::shared_ptr<HostTiers> host_tiers = make_host_tiers(static_cast<int>(threads));
  EPK_TRY(add_domain_lanes(cfg, 0, 0, host_tiers, lanes));
  const std::size_t per_domain = lanes.size();
  for (std::size_t d = 0; d < cfg.domains.size(); ++d) {
    const DomainSpec& spec = cfg.domains[d];
    if (lanes.size() + per_domain > shm::kMaxPools) {
      return make_error(ErrorCode::kInvalidArgument,
                        "domain '" + spec.name + "': " + std::to_string(per_domain) + " more pools would pass the " +
                            std::to_string(shm::kMaxPools) + " one epkd serves");
    }
    EPK_TRY(add_domain_lanes(cfg, static_cast<std::uint32_t>(d + 1), spec.budget_bytes, host_tiers, lanes));
    spdlog::info("domain {} '{}': pools {} to {}", d + 1, spec.name, lanes.size() - per_domain, lanes.size() - 1);
  }
  return lanes;
}

Lane* lane_for_device(std::vector<Lane>& lanes, std::uint32_t domain, std::uint32_t device) {
  for (Lane& l : lanes) {
    if (l.domain == domain && l.served_device() == device) return &l;
  }
  return nullptr;
}

}  // namespace epk::daemon
