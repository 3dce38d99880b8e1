#include "daemon/lanes/host_tiers.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace epk::daemon {

Result<std::shared_ptr<const HostTier>> HostTiers::get(std::uint32_t model_id, const serve::DeviceTier& placement,
                                                       const ModelSource& src, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(tiers_, [](const auto& kv) { return kv.second.expired(); });
  if (auto it = tiers_.find(model_id); it != tiers_.end()) {
    if (std::shared_ptr<const HostTier> made = it->second.lock()) return made;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tier = std::make_shared<HostTier>();
  EPK_TRY_ASSIGN(tier->memory, shm::HostTierMemory::create(placement.region_bytes(),
                                                           "epkd-host-tier-" + std::to_string(model_id)));
  // verify_stored reads the model's map (or its resident copy) and hashes: safe on several threads at once.
  EPK_TRY(placement.fill_host(tier->memory.writable(), [&src](std::size_t i) { return src.verify_stored(i); },
                              threads_));
  EPK_TRY(tier->memory.seal());
  const auto t1 = std::chrono::steady_clock::now();
  const std::span<const std::byte> bytes = tier->memory.bytes();
  Result<shm::HostRegistration> reg = shm::HostRegistration::register_memory(bytes.data(), bytes.size(), true, device);
  if (reg) {
    tier->registration = std::move(*reg);
  } else {
    spdlog::warn("host_tier model_id={} registered=false error=\"{}\" note=\"copies to the device run from pageable "
                 "memory (several times slower)\"",
                 model_id, reg.error().to_string());
  }
  const auto t2 = std::chrono::steady_clock::now();
  using ms = std::chrono::duration<double, std::milli>;
  spdlog::info("host_tier model_id={} bytes={} threads={} fill_ms={:.1f} register_ms={:.1f}", model_id, bytes.size(),
               threads_, ms(t1 - t0).count(), ms(t2 - t1).count());
  tiers_[model_id] = tier;
  return std::shared_ptr<const HostTier>(std::move(tier));
}

}  // namespace epk::daemon
