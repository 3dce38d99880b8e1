// Models and figures (daemon/service.h): opening models (at start and on SIGHUP), open_model, open_stored, stats and
// the models list.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include "daemon/log_format.h"
#include "daemon/epk_source.h"
#include "daemon/service.h"
#include "daemon/synthetic_source.h"

namespace epk::daemon::server {

bool Service::known(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return registry_.find(name).has_value();
}

// Runs at start and on the reload thread, one call at a time, so nothing else adds models meanwhile. The service lock
// is taken only to look a name up and to publish the model: reading, checksumming and uploading a model must not
// stall the sessions' acquires.
std::size_t Service::open_models(const DaemonConfig& cfg) {
  std::size_t opened = 0;
  for (const ModelSpec& m : cfg.models) {
    if (known(m.name)) continue;
    auto t0 = Clock::now();
    auto src = open_epk_source(m.path, {cfg.resident_compressed, {}});
    if (!src) {
      spdlog::error("model_refused model={} path={} error={}", kv(m.name), kv(m.path), kv(src.error().to_string()));
      continue;
    }
    if (cfg.resident_compressed) {
      spdlog::info("model_resident model={} where=host ms={:.1f}", kv(m.name),
                   std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    opened += add_model(m.name, std::shared_ptr<const ModelSource>(std::move(*src)), m.access);
  }
  for (const ModelSpec& m : cfg.synthetic) {
    if (known(m.name)) continue;
    auto src = SyntheticSource::create(m.path, std::chrono::microseconds(cfg.synthetic_delay_us));
    if (!src) {
      spdlog::error("model_refused model={} synthetic=true error={}", kv(m.name), kv(src.error().to_string()));
      continue;
    }
    spdlog::warn("model_synthetic model={} tensors={} note=\"test data, not a checkpoint\"", kv(m.name),
                 (*src)->tensors().size());
    opened += add_model(m.name, std::shared_ptr<const ModelSource>(std::move(*src)), m.access);
  }
  return opened;
}

std::size_t Service::add_model(const std::string& name, std::shared_ptr<const ModelSource> src,
                               const AccessRule& access) {
  std::string origin = src->origin();
  std::size_t n = src->tensors().size();
  std::shared_ptr<const ModelSource> kept = src;
  Result<std::uint32_t> id = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return registry_.add(name, std::move(src), access);
  }();
  if (!id) {
    spdlog::error("model_refused model={} error={}", kv(name), kv(id.error().to_string()));
    return 0;
  }
  // Outside the service lock: until a device's tier is published, its acquires of this model take the CPU fallback.
  for (Lane& l : lanes_) {
    if (!l.gpu || !cfg_.device_resident) continue;
    // Resident compressed tier, at open, on every served device (eager: an uncached acquire on any device is one
    // kernel). A model whose tensors cannot be made resident there still serves (CPU decoder and a copy), but says so.
    auto added = l.gpu->add_model(*id, kept);
    if (!added) {
      spdlog::error("model_resident model={} where=device device={} ok=false fallback=cpu error={}", kv(name),
                    l.gpu->device(), kv(added.error().to_string()));
    } else {
      spdlog::info("model_resident model={} where=device device={} bytes={}", kv(name), l.gpu->device(), *added);
    }
  }
  spdlog::info("model_opened model={} id={} origin={} tensors={}", kv(name), *id, kv(origin), n);
  return 1;
}

std::size_t Service::model_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return registry_.size();
}

void Service::deny_model(Session& s, std::uint32_t req, const std::string& model) {
  spdlog::warn("access_denied client={} {} model={} rule=model_uids_gids", s.id(), peer_kv(s.peer()), kv(model));
  s.send_error(req, shm::WireStatus::kDenied,
               "access denied: model '" + model + "' is not served to " + describe(s.peer()) + " (its uids/gids)");
}

std::string Service::device_not_served(std::uint32_t device) {
  return "device " + std::to_string(device) + " is not served by this epkd";
}

void Service::on_open_model(Session& s, std::uint32_t req, const shm::OpenModelRequest& m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto id = registry_.find(m.model);
  if (!id) return s.send_error(req, shm::WireStatus::kNotFound, "model '" + m.model + "' is not served here");
  if (!may_use(s, *registry_.get(*id))) return deny_model(s, req, m.model);
  std::vector<std::uint8_t> out;
  shm::encode_open_model_reply(req, {*id, static_cast<std::uint32_t>(registry_.get(*id)->source->tensors().size())},
                               &out);
  s.send(out);
}

// Client-side decode: the model file (read-only) and the model's compressed tier on the device, for a client that
// decodes in its own CUDA context. Only root, epkd's own uid and cfg.client_decode get them: the tier is mapped
// writable (docs/SECURITY.md).
void Service::on_open_stored(Session& s, std::uint32_t req, const shm::OpenStoredRequest& m) {
  const PeerCredentials& peer = s.peer();
  if (peer.uid != 0 && peer.uid != ::geteuid() && !lists(cfg_.client_decode, peer)) {
    spdlog::warn("access_denied client={} {} request=open_stored rule=client_decode_uids_gids", s.id(),
                 peer_kv(peer));
    return s.send_error(req, shm::WireStatus::kDenied,
                        "access denied: " + describe(peer) +
                            " may not decode in its own context (client_decode_uids / client_decode_gids); acquire "
                            "the tensors instead");
  }
  const ModelEntry* model = registry_.get(m.model_id);
  if (model == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, "open_stored: unknown model id");
  if (!may_use(s, *model)) return deny_model(s, req, model->name);
  Lane* lane = lane_for_device(lanes_, s.domain(), m.device);
  if (lane == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, device_not_served(m.device));
  std::optional<GpuBackend::TierExport> tier = lane->gpu ? lane->gpu->tier(m.model_id) : std::nullopt;
  const int file = model->source->file_fd();
  if (!tier || file < 0) {
    return s.send_error(req, shm::WireStatus::kUnsupported,
                        "model '" + model->name + "' has no compressed tier on device " + std::to_string(m.device) +
                            (lane->gpu ? " (no lattice-rans tensor, or not an .epk file)"
                                       : " (a host pool serves it)"));
  }
  std::vector<std::uint8_t> out;
  shm::encode_open_stored_reply(req, {tier->bytes}, &out);
  s.send_with_fds(std::move(out), {file, tier->fd});
}

void Service::on_stats(Session& s, std::uint32_t req) {
  std::vector<std::uint8_t> out;
  shm::encode_stats_reply(req, stats(), &out);
  s.send(out);
}

shm::StatsReply Service::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  shm::StatsReply r;
  for (const Lane& l : lanes_) {
    CacheStats c = [&] {
      std::lock_guard<LaneLock> ll(lane_mu(l));
      return l.cache->stats();
    }();
    c.hits += lane_hits(l);
    shm::PoolStats ps{l.pool_id,      l.pool->device(), c.budget_bytes, c.used_bytes, c.pinned_bytes, c.slots,
                      c.pinned_slots, c.pins,           c.hits,         c.misses,     c.evictions,
                      l.gpu ? l.gpu->resident_bytes() : 0, c.fenced_bytes, c.prefetched_bytes};
    r.budget_bytes += ps.budget_bytes;
    r.used_bytes += ps.used_bytes;
    r.pinned_bytes += ps.pinned_bytes;
    r.slots += ps.slots;
    r.pinned_slots += ps.pinned_slots;
    r.pins += ps.pins;
    r.hits += ps.hits;
    r.misses += ps.misses;
    r.evictions += ps.evictions;
    r.resident_bytes += ps.resident_bytes;
    r.pools.push_back(ps);
  }
  r.decodes = decodes_;
  r.decode_ns = decode_ns_;
  r.clients = sessions_.size();
  r.models = registry_.size();
  r.prefetches = prefetches_;
  r.prefetches_dropped = prefetches_dropped_;
  r.space_waits = space_waits_.load(std::memory_order_relaxed);
  r.space_wait_ns = space_wait_ns_.load(std::memory_order_relaxed);
  return r;
}

void Service::on_models(Session& s, std::uint32_t req) {
  std::vector<std::uint8_t> out;
  shm::encode_models_reply(req, models_info(&s.peer()), &out);
  s.send(out);
}

// One page of a model's tensor list, from index m.first (the sources are const: no lock).
void Service::on_tensors(Session& s, std::uint32_t req, const shm::TensorsRequest& m) {
  const ModelEntry* model = registry_.get(m.model_id);
  if (model == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, "tensors: unknown model id");
  if (!may_use(s, *model)) return deny_model(s, req, model->name);
  const std::vector<TensorMeta>& all = model->source->tensors();
  shm::TensorsReply r;
  r.total = static_cast<std::uint32_t>(all.size());
  // More than one message holds is cut by the encoder; a page of kMaxPayload / 16 entries is more than fits.
  const std::size_t end = std::min(all.size(), std::size_t{m.first} + shm::kMaxPayload / 16);
  for (std::size_t i = m.first; i < end; ++i) {
    r.tensors.push_back({all[i].name, static_cast<std::uint32_t>(all[i].dtype), all[i].encoding, all[i].shape,
                         all[i].stored_bytes});
  }
  std::vector<std::uint8_t> out;
  shm::encode_tensors_reply(req, r, &out);
  s.send(out);
}

// A walk over each lane's slots under its lock. A client's list holds only the models it may use: the others' names
// and occupancy are not its business.
shm::ModelsReply Service::models_info(const PeerCredentials* peer) {
  std::lock_guard<std::mutex> lock(mu_);
  shm::ModelsReply r;
  std::vector<std::int64_t> index(registry_.size(), -1);  // model id -> its entry in the reply
  for (std::uint32_t id = 0; id < registry_.size(); ++id) {
    const ModelEntry& e = *registry_.get(id);
    if (peer != nullptr && !may_use(*peer, e)) continue;
    index[id] = static_cast<std::int64_t>(r.models.size());
    r.models.emplace_back();
    r.models.back().name = e.name;
    r.models.back().tensors = static_cast<std::uint32_t>(e.source->tensors().size());
  }
  r.total = static_cast<std::uint32_t>(r.models.size());
  for (const Lane& l : lanes_) {
    std::lock_guard<LaneLock> ll(lane_mu(l));
    l.cache->for_each_slot([&](const Slot& slot) {
      if (slot.key.model >= index.size() || index[slot.key.model] < 0) return;
      shm::ModelInfo& m = r.models[static_cast<std::size_t>(index[slot.key.model])];
      ++m.cached_slots;
      m.cached_bytes += slot.bytes;
      if (slot.pin_total > 0) ++m.pinned_slots;
    });
  }
  return r;
}

DurationHistogram Service::decode_histogram() {
  std::lock_guard<std::mutex> lock(mu_);
  return decode_hist_;
}

}  // namespace epk::daemon::server
