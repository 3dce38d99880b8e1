// epk status --socket S [--json]: what a running epkd serves and holds: models (tensors, cached slots and bytes,
// pinned slots), each pool's bytes used against its budget, pins, hits, misses, evictions, decodes and decode time.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "client/client.h"
#include "tools/epk/cli_common.h"

namespace epk::cli {
namespace {

struct StatusArgs {
  std::string socket;
  bool json = false;
};

const char* pool_kind_name(shm::PoolKind k) { return k == shm::PoolKind::kHost ? "host" : "device"; }

Status run_status(const StatusArgs& args) {
  EPK_TRY_ASSIGN(client::Client c, client::Client::connect(args.socket, 10000));
  EPK_TRY_ASSIGN(client::Stats s, c.stats());
  EPK_TRY_ASSIGN(shm::ModelsReply models, c.models());
  std::vector<shm::PoolInfo> pools = c.pools();
  // One pool per served device (or one host pool), each with its own cache: the stats reply carries every pool's
  // budget, bytes used, pins and counters; the cache line below is their sum.
  auto pool_stats = [&](std::uint32_t id) -> shm::PoolStats {
    for (const shm::PoolStats& ps : s.pools) {
      if (ps.pool_id == id) return ps;
    }
    return {};
  };
  const double ms = static_cast<double>(s.decode_ns) / 1e6;
  const std::uint64_t others = s.clients > 0 ? s.clients - 1 : 0;  // not counting this connection
  if (args.json) {
    nlohmann::json j;
    j["socket"] = args.socket;
    j["clients"] = others;
    j["pools"] = nlohmann::json::array();
    for (const auto& p : pools) {
      const shm::PoolStats ps = pool_stats(p.pool_id);
      j["pools"].push_back({{"pool_id", p.pool_id},
                            {"kind", pool_kind_name(p.kind)},
                            {"device", p.device},
                            {"size_bytes", p.size},
                            {"budget_bytes", ps.budget_bytes},
                            {"used_bytes", ps.used_bytes},
                            {"pinned_bytes", ps.pinned_bytes},
                            {"tensors_cached", ps.slots},
                            {"pinned_slots", ps.pinned_slots},
                            {"pins", ps.pins},
                            {"hits", ps.hits},
                            {"misses", ps.misses},
                            {"evictions", ps.evictions},
                            {"resident_bytes", ps.resident_bytes},
                            {"fenced_bytes", ps.fenced_bytes},
                            {"prefetched_bytes", ps.prefetched_bytes},
                            {"host_tier_bytes", ps.host_tier_bytes},
                            {"staged_bytes", ps.staged_bytes}});
    }
    j["cache"] = {{"budget_bytes", s.budget_bytes},
                  {"used_bytes", s.used_bytes},
                  {"pinned_bytes", s.pinned_bytes},
                  {"tensors_cached", s.slots},
                  {"pinned_slots", s.pinned_slots},
                  {"pins", s.pins},
                  {"hits", s.hits},
                  {"misses", s.misses},
                  {"evictions", s.evictions},
                  {"prefetches", s.prefetches},
                  {"prefetches_dropped", s.prefetches_dropped},
                  {"space_waits", s.space_waits},
                  {"space_wait_ns", s.space_wait_ns}};
    j["decode"] = {{"decodes", s.decodes}, {"decode_ns", s.decode_ns}};
    j["resident_bytes"] = s.resident_bytes;
    j["models"] = nlohmann::json::array();
    for (const auto& m : models.models) {
      j["models"].push_back({{"name", m.name},
                             {"tensors", m.tensors},
                             {"cached_slots", m.cached_slots},
                             {"cached_bytes", m.cached_bytes},
                             {"pinned_slots", m.pinned_slots},
                             {"tier_device_bytes", m.tier_device_bytes},
                             {"tier_host_bytes", m.tier_host_bytes}});
    }
    j["models_total"] = models.total;
    std::printf("%s\n", json_text(j).c_str());
    return {};
  }
  std::printf("epkd at %s: %llu model(s), %llu other client(s)\n", printable(args.socket).c_str(),
              static_cast<unsigned long long>(s.models), static_cast<unsigned long long>(others));
  for (const auto& p : pools) {
    const shm::PoolStats ps = pool_stats(p.pool_id);
    std::printf("pool %u (%s%s): %s used of %s budget (%.1f%%), %s pinned in %llu slot(s), %llu pin(s); "
                "hits %llu, misses %llu, evictions %llu\n",
                p.pool_id, pool_kind_name(p.kind),
                p.device >= 0 ? (", device " + std::to_string(p.device)).c_str() : "",
                human_bytes(ps.used_bytes).c_str(), human_bytes(ps.budget_bytes).c_str(),
                ps.budget_bytes ? 100.0 * static_cast<double>(ps.used_bytes) / static_cast<double>(ps.budget_bytes)
                                : 0.0,
                human_bytes(ps.pinned_bytes).c_str(), static_cast<unsigned long long>(ps.pinned_slots),
                static_cast<unsigned long long>(ps.pins), static_cast<unsigned long long>(ps.hits),
                static_cast<unsigned long long>(ps.misses), static_cast<unsigned long long>(ps.evictions));
    std::printf("  %s released behind pending fences, %s prefetched and not yet acquired\n",
                human_bytes(ps.fenced_bytes).c_str(), human_bytes(ps.prefetched_bytes).c_str());
    if (ps.resident_bytes != 0) {
      std::printf("  resident compressed tier on device %d: %s (outside the budget)\n", p.device,
                  human_bytes(ps.resident_bytes).c_str());
    }
    if (ps.host_tier_bytes != 0) {
      std::printf("  host tier (decoded on device %d): %s; copied to the device so far: %s\n", p.device,
                  human_bytes(ps.host_tier_bytes).c_str(), human_bytes(ps.staged_bytes).c_str());
    }
  }
  std::printf(
      "cache: %llu tensor(s) cached, %llu pinned (%llu pins); hits %llu, misses %llu, evictions %llu, "
      "prefetches %llu (%llu dropped); %llu acquire(s) waited for space, %.2f ms in total\n",
      static_cast<unsigned long long>(s.slots), static_cast<unsigned long long>(s.pinned_slots),
      static_cast<unsigned long long>(s.pins), static_cast<unsigned long long>(s.hits),
      static_cast<unsigned long long>(s.misses), static_cast<unsigned long long>(s.evictions),
      static_cast<unsigned long long>(s.prefetches), static_cast<unsigned long long>(s.prefetches_dropped),
      static_cast<unsigned long long>(s.space_waits), static_cast<double>(s.space_wait_ns) / 1e6);
  std::printf("decode: %llu decode(s), %.2f ms in total", static_cast<unsigned long long>(s.decodes), ms);
  if (s.decodes) std::printf(", %.3f ms each", ms / static_cast<double>(s.decodes));
  std::printf("\n");
  std::printf("%-32s %8s %8s %12s %8s %12s %12s\n", "model", "tensors", "cached", "bytes", "pinned", "tier on GPU",
              "tier in host");
  for (const auto& m : models.models) {
    std::printf("%-32s %8u %8llu %12s %8llu %12s %12s\n", printable(m.name).c_str(), m.tensors,
                static_cast<unsigned long long>(m.cached_slots), human_bytes(m.cached_bytes).c_str(),
                static_cast<unsigned long long>(m.pinned_slots), human_bytes(m.tier_device_bytes).c_str(),
                human_bytes(m.tier_host_bytes).c_str());
  }
  if (models.models.size() < models.total) {
    std::printf("(%zu of %u models listed)\n", models.models.size(), models.total);
  }
  return {};
}

}  // namespace

void add_status_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] =
      add_command(app, exit_code, "status", "Show what a running epkd serves and holds in its cache", run_status);
  add_socket_option(*cmd, args->socket);
  cmd->add_flag("--json", args->json, "print JSON");
}

}  // namespace epk::cli
