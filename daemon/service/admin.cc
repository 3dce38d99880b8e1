// Models and figures (daemon/service/service.h): opening models (at start and on SIGHUP), open_model, open_stored, stats and
// the models list.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <unordered_set>

#include "daemon/log_format.h"
#include "daemon/service/service.h"
#include "daemon/sources/epk_source.h"
#include "daemon/sources/synthetic_source.h"

namespace epk::daemon::server {

namespace {

// The file a model was opened from (the source's own fd when it has one: the file epkd mapped, whatever happened to
// the path since), or what the path names now. nullopt when it cannot be read.
std::optional<FileIdentity> identity_of(int fd, const std::string& path) {
  struct stat st {};
  if (fd >= 0 ? ::fstat(fd, &st) != 0 : ::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileIdentity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                      static_cast<std::uint64_t>(st.st_size),
                      std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
}

bool same_access(const AccessRule& a, const AccessRule& b) { return a.uids == b.uids && a.gids == b.gids; }

}  // namespace

std::optional<std::uint32_t> Service::served_id(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return registry_.find(name);
}

// Runs at start and on the reload thread, one call at a time, so nothing else adds or retires models meanwhile
// (entries read here without the lock are changed only by this thread). The service lock is taken only to look a name
// up and to publish or retire a model: reading, checksumming and uploading a model must not stall the sessions.
Service::ModelChanges Service::apply_models(const DaemonConfig& cfg, bool reload) {
  ModelChanges changes;
  std::unordered_set<std::string> listed;
  auto open_one = [&](const ModelSpec& m, bool synthetic) {
    listed.insert(m.name);
    const std::optional<std::uint32_t> id = served_id(m.name);
    std::string why;  // why a served model gets a new generation
    if (id) {
      const ModelEntry& e = *registry_.get(*id);
      if (!reload) return;
      if (e.path != m.path) {
        why = synthetic ? "spec changed" : "path changed";
      } else if (!synthetic && e.file != FileIdentity{} &&
                 identity_of(-1, m.path) != std::optional<FileIdentity>(e.file)) {
        // A file that cannot be read now is left to the open below to report; the old generation keeps serving. One
        // whose identity could not be read at its open (all zero) is not compared: it would differ at every reload.
        why = "file changed";
      } else if (!same_access(e.access, m.access)) {
        why = "uids/gids changed";
      } else {
        return;
      }
    }
    const auto t0 = Clock::now();
    Result<std::unique_ptr<ModelSource>> src = [&]() -> Result<std::unique_ptr<ModelSource>> {
      if (!synthetic) return open_epk_source(m.path, {cfg.resident_compressed, {}});
      auto made = SyntheticSource::create(m.path, std::chrono::microseconds(cfg.synthetic_delay_us));
      if (!made) return made.error();
      return std::unique_ptr<ModelSource>(std::move(*made));
    }();
    if (!src) {
      ++changes.failed;
      spdlog::error("model_refused model={} {}={} error={}{}", kv(m.name), synthetic ? "spec" : "path", kv(m.path),
                    kv(src.error().to_string()), id ? " note=\"the generation in force keeps serving\"" : "");
      return;
    }
    if (synthetic) {
      spdlog::warn("model_synthetic model={} tensors={} note=\"test data, not a checkpoint\"", kv(m.name),
                   (*src)->tensors().size());
    } else if (cfg.resident_compressed) {
      spdlog::info("model_resident model={} where=host ms={:.1f}", kv(m.name),
                   std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    const std::optional<FileIdentity> file =
        synthetic ? std::optional<FileIdentity>(FileIdentity{}) : identity_of((*src)->file_fd(), m.path);
    if (!add_model(m, std::shared_ptr<const ModelSource>(std::move(*src)), file.value_or(FileIdentity{}), id)) {
      ++changes.failed;
      return;
    }
    if (id) {
      ++changes.replaced;
      spdlog::info("model_replaced model={} old_id={} reason={}", kv(m.name), *id, kv(why));
    } else {
      ++changes.added;
    }
  };
  for (const ModelSpec& m : cfg.models) open_one(m, false);
  for (const ModelSpec& m : cfg.synthetic) open_one(m, true);
  if (reload) {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::uint32_t id = 0; id < registry_.size(); ++id) {
      const ModelEntry& e = *registry_.get(id);
      if (e.retired.load() || listed.count(e.name) != 0) continue;
      registry_.retire(id, "removed from the config at a reload");
      retiring_.push_back(id);
      retiring_count_.store(retiring_.size());
      ++changes.removed;
      spdlog::info("model_removed model={} id={} note=\"leases held on it stay valid until released\"", kv(e.name),
                   id);
    }
  }
  sweep_retired();
  return changes;
}

bool Service::add_model(const ModelSpec& spec, std::shared_ptr<const ModelSource> src, FileIdentity file,
                        std::optional<std::uint32_t> replaces) {
  const std::string& name = spec.name;
  std::string origin = src->origin();
  std::size_t n = src->tensors().size();
  std::shared_ptr<const ModelSource> kept = src;
  Result<std::uint32_t> id = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    // The old generation goes and the new one comes in one hold of the lock: an open by name finds one of them.
    Result<std::uint32_t> added = registry_.add(
        name, std::move(src), spec.access, spec.path, file, replaces,
        "replaced by a new generation at a reload (its file or settings changed); open it again");
    if (added && replaces) {
      retiring_.push_back(*replaces);
      retiring_count_.store(retiring_.size());
    }
    return added;
  }();
  if (!id) {
    spdlog::error("model_refused model={} error={}", kv(name), kv(id.error().to_string()));
    return false;
  }
  // Outside the service lock: until a device's tier is published, its acquires of this model take the CPU fallback.
  for (Lane& l : lanes_) {
    if (!l.gpu) continue;
    // The compressed tier, at open, for every served device (eager: an uncached acquire on any device is one copy and
    // one kernel at most): on the device where its tier budget has room, else in the model's host tier. A model whose
    // tier cannot be made there still serves (CPU decoder and a copy), but says so.
    auto added = l.gpu->add_model(*id, kept);
    if (!added) {
      spdlog::error("model_resident model={} device={} ok=false fallback=cpu error={}", kv(name), l.gpu->device(),
                    kv(added.error().to_string()));
    } else {
      const char* where = added->tier_on_device == added->tier_bytes ? "device"
                          : added->tier_on_device == 0                ? "host"
                                                                      : "split";
      spdlog::info("model_resident model={} where={} device={} tier_on_device={} host_bytes={} device_bytes={}",
                   kv(name), where, l.gpu->device(), added->tier_on_device, added->host_bytes, added->device_bytes);
    }
  }
  spdlog::info("model_opened model={} id={} origin={} tensors={}", kv(name), *id, kv(origin), n);
  return true;
}

// Under mu_, each lane's lock is taken in turn: a request that checks `retired` under a lane's lock after this walk
// passed it sees it set, so once every lane was passed and nothing of the model was left, no request can still be
// using its source (every use of a source is under mu_ or a lane lock, after such a check).
std::size_t Service::sweep_retired() {
  std::vector<std::uint32_t> done;
  std::vector<std::shared_ptr<const ModelSource>> sources;
  std::size_t still = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (retiring_.empty()) return 0;
    std::erase_if(retiring_, [&](std::uint32_t id) {
      std::size_t left = 0;
      for (Lane& l : lanes_) {
        std::lock_guard<LaneLock> ll(lane_mu(l));
        left += l.cache->drop_model(id);
        check(l);
      }
      if (left != 0) return false;
      sources.push_back(registry_.release_source(id));
      done.push_back(id);
      return true;
    });
    retiring_count_.store(retiring_.size());
    still = retiring_.size();
  }
  for (const std::uint32_t id : done) {
    std::uint64_t freed = 0;
    for (Lane& l : lanes_) {
      if (l.gpu) freed += l.gpu->remove_model(id);
    }
    spdlog::info("model_released model={} id={} device_bytes={} note=\"nothing holds it any more\"",
                 kv(registry_.get(id)->name), id, freed);
  }
  sources.clear();  // the file mappings go here, outside the locks
  return still;
}

void Service::model_gone(Session& s, std::uint32_t req, const ModelEntry& model) {
  s.send_error(req, shm::WireStatus::kModelGone,
               "model '" + model.name + "' is no longer served: " + model.retired_because);
}

std::size_t Service::model_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return registry_.live();
}

bool Service::log_allowed(RefusalLog& log, uid_t uid, std::uint64_t* suppressed) {
  std::lock_guard<std::mutex> lock(log_limit_mu_);
  return log.should_log(uid, RefusalLog::Clock::now(), suppressed);
}

void Service::log_hidden(const Session& s, const std::string& model, const char* request) {
  std::uint64_t suppressed = 0;
  if (!log_allowed(hidden_log_, s.peer().uid, &suppressed)) return;
  spdlog::warn("access_denied client={} {} model={} request={} rule=model_uids_gids unlogged_since_last={}", s.id(),
               peer_kv(s.peer()), kv(model), request, suppressed);
}

void Service::log_blocked(const Session& s, const Lane& lane, const SpaceReport& space) {
  std::uint64_t suppressed = 0;
  if (!log_allowed(blocked_log_, s.peer().uid, &suppressed)) return;
  std::string holders;
  for (const UidPins& p : lane.cache->pin_holders()) {
    if (holders.size() > 200) break;  // the largest holders; a line stays a line
    holders += (holders.empty() ? "" : ",") + std::to_string(p.uid) + ":" + std::to_string(p.bytes);
  }
  spdlog::warn("acquire_blocked client={} {} pool={} request={} pinned={} largest_gap={} pin_holders={} "
               "unlogged_since_last={}",
               s.id(), peer_kv(s.peer()), lane.pool_id, space.request, space.pinned, space.largest_gap,
               holders.empty() ? "none" : holders, suppressed);
}

void Service::hide_model(Session& s, std::uint32_t req, const char* request, const ModelEntry& model) {
  log_hidden(s, model.name, request);
  s.send_error(req, shm::WireStatus::kNotFound, std::string(request) + ": unknown model id");
}

std::string Service::device_not_served(std::uint32_t device) {
  return "device " + std::to_string(device) + " is not served by this epkd";
}

void Service::on_open_model(Session& s, std::uint32_t req, const shm::OpenModelRequest& m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto id = registry_.find(m.model);
  // A model the peer may not use is not served to it: the answer is an unknown name's.
  if (!id || !may_use(s, *registry_.get(*id))) {
    if (id) log_hidden(s, m.model, "open_model");
    return s.send_error(req, shm::WireStatus::kNotFound, "model '" + m.model + "' is not served here");
  }
  std::vector<std::uint8_t> out;
  shm::encode_open_model_reply(req, {*id, registry_.get(*id)->tensor_count}, &out);
  s.send(out);
}

// Client-side decode: the model file (read-only) and the model's compressed tier for that device: its region on the
// device, or its host tier (a sealed memfd). A device region is mapped writable (CUDA VMM has no read-only device
// mapping), so only root, epkd's own uid and cfg.client_decode get it; a host tier is read-only to everyone, so any
// peer that may use the model gets it (docs/SECURITY.md).
void Service::on_open_stored(Session& s, std::uint32_t req, const shm::OpenStoredRequest& m) {
  const PeerCredentials& peer = s.peer();
  std::lock_guard<std::mutex> lock(mu_);  // a retired model's source and tiers go under it (sweep_retired)
  const ModelEntry* model = registry_.get(m.model_id);
  if (model == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, "open_stored: unknown model id");
  if (!may_use(s, *model)) return hide_model(s, req, "open_stored", *model);
  if (model->retired.load()) return model_gone(s, req, *model);
  Lane* lane = lane_for_device(lanes_, s.domain(), m.device);
  if (lane == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, device_not_served(m.device));
  // A host tier still being filled (the cold start) is passed once it is sealed: the request is answered then, from
  // the start (the model may have gone meanwhile), on the session's own thread.
  if (lane->gpu && lane->gpu->when_tier_ready(m.model_id, [this, weak = s.weak_from_this(), req, m] {
        Session::post_guarded(weak, [this, req, m](Session& again) { on_open_stored(again, req, m); });
      })) {
    return;
  }
  std::optional<GpuBackend::TierExport> tier = lane->gpu ? lane->gpu->tier(m.model_id) : std::nullopt;
  const int file = model->source->file_fd();
  const bool host = tier && tier->host;
  if (!host && !privileged(peer) && !lists(cfg_.client_decode, peer)) {
    spdlog::warn("access_denied client={} {} request=open_stored rule=client_decode_uids_gids", s.id(),
                 peer_kv(peer));
    return s.send_error(req, shm::WireStatus::kDenied,
                        "access denied: " + describe(peer) +
                            " may not decode in its own context from a tier on the device (client_decode_uids / "
                            "client_decode_gids); acquire the tensors instead");
  }
  if (!tier || file < 0) {
    return s.send_error(req, shm::WireStatus::kUnsupported,
                        "model '" + model->name + "' has no compressed tier on device " + std::to_string(m.device) +
                            (lane->gpu ? " (no lattice-rans tensor, not an .epk file, or its tier could not be made: "
                                         "epkd's log says why)"
                                       : " (a host pool serves it)"));
  }
  std::vector<std::uint8_t> out;
  const shm::TierWhere where = host ? shm::TierWhere::kHost : shm::TierWhere::kDevice;
  shm::encode_open_stored_reply(req, {tier->bytes, static_cast<std::uint32_t>(where)}, &out);
  s.send_with_fds(std::move(out), {file, tier->fd});
}

void Service::on_stats(Session& s, std::uint32_t req) {
  std::vector<std::uint8_t> out;
  shm::encode_stats_reply(req, stats(&s.peer(), s.domain()), &out);
  s.send(out);
}

shm::StatsReply Service::stats(const PeerCredentials* peer, std::uint32_t domain) {
  if (peer != nullptr && epk::daemon::privileged(*peer)) peer = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  shm::StatsReply r;
  for (const Lane& l : lanes_) {
    if (peer != nullptr && l.domain != domain) continue;
    CacheStats c = [&] {
      std::lock_guard<LaneLock> ll(lane_mu(l));
      return l.cache->stats();
    }();
    c.hits += lane_hits(l);
    shm::PoolStats ps{l.pool_id,      l.pool->device(), c.budget_bytes, c.used_bytes, c.pinned_bytes, c.slots,
                      c.pinned_slots, c.pins,           c.hits,         c.misses,     c.evictions,
                      l.gpu ? l.gpu->resident_bytes() : 0, c.fenced_bytes, c.prefetched_bytes,
                      l.gpu ? l.gpu->host_tier_bytes() : 0, l.gpu ? l.gpu->staged_bytes() : 0};
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
  if (peer == nullptr) {
    r.clients = sessions_.size();
    r.models = registry_.live();
  } else {
    const auto u = sessions_per_uid_.find(peer->uid);
    r.clients = u == sessions_per_uid_.end() ? 0 : u->second;
    for (std::uint32_t id = 0; id < registry_.size(); ++id) {
      const ModelEntry& e = *registry_.get(id);
      if (!e.gone.load() && may_use(*peer, e)) ++r.models;
    }
  }
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

// One page of a model's tensor list, from index m.first.
void Service::on_tensors(Session& s, std::uint32_t req, const shm::TensorsRequest& m) {
  std::unique_lock<std::mutex> lock(mu_);  // a retired model's source goes under it (sweep_retired)
  const ModelEntry* model = registry_.get(m.model_id);
  if (model == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, "tensors: unknown model id");
  if (!may_use(s, *model)) return hide_model(s, req, "tensors", *model);
  if (model->retired.load()) return model_gone(s, req, *model);
  const std::vector<TensorMeta>& all = model->source->tensors();
  shm::TensorsReply r;
  r.total = static_cast<std::uint32_t>(all.size());
  // More than one message holds is cut by the encoder; a page of kMaxPayload / 16 entries is more than fits.
  const std::size_t end = std::min(all.size(), std::size_t{m.first} + shm::kMaxPayload / 16);
  for (std::size_t i = m.first; i < end; ++i) {
    r.tensors.push_back({all[i].name, static_cast<std::uint32_t>(all[i].dtype), all[i].encoding, all[i].shape,
                         all[i].stored_bytes});
  }
  lock.unlock();
  std::vector<std::uint8_t> out;
  shm::encode_tensors_reply(req, r, &out);
  s.send(out);
}

// A walk over each lane's slots under its lock. A client's list holds only the models it may use: the others' names
// and occupancy are not its business.
shm::ModelsReply Service::models_info(const PeerCredentials* peer, bool restricted) {
  std::lock_guard<std::mutex> lock(mu_);
  shm::ModelsReply r;
  std::vector<std::int64_t> index(registry_.size(), -1);  // model id -> its entry in the reply
  for (std::uint32_t id = 0; id < registry_.size(); ++id) {
    const ModelEntry& e = *registry_.get(id);
    if (e.gone.load() || (peer != nullptr && !may_use(*peer, e)) || (!restricted && !e.access.open())) continue;
    index[id] = static_cast<std::int64_t>(r.models.size());
    r.models.emplace_back();
    // A retired model is listed while clients hold its slots, under a name no served model has (metrics labels and
    // `epk status` rows stay distinct when a new generation serves under the old name).
    r.models.back().name = e.retired.load() ? e.name + " (retired, id " + std::to_string(id) + ")" : e.name;
    r.models.back().tensors = e.tensor_count;
  }
  r.total = static_cast<std::uint32_t>(r.models.size());
  std::vector<std::uint64_t> shared_host(registry_.size(), 0);
  for (const Lane& l : lanes_) {
    std::lock_guard<LaneLock> ll(lane_mu(l));
    l.cache->for_each_slot([&](const Slot& slot) {
      if (slot.key.model >= index.size() || index[slot.key.model] < 0) return;
      shm::ModelInfo& m = r.models[static_cast<std::size_t>(index[slot.key.model])];
      ++m.cached_slots;
      m.cached_bytes += slot.bytes;
      if (slot.pin_total > 0) ++m.pinned_slots;
    });
    if (!l.gpu) continue;
    for (std::uint32_t id = 0; id < index.size(); ++id) {
      if (index[id] < 0) continue;
      shm::ModelInfo& m = r.models[static_cast<std::size_t>(index[id])];
      const GpuBackend::ModelTier t = l.gpu->model_tier(id);
      m.tier_device_bytes += t.device;
      shared_host[id] = std::max(shared_host[id], t.host);  // one host tier per model, shared by the lanes
      m.tier_host_bytes += t.lane_host;                      // each lane's own intq forms
    }
  }
  for (std::uint32_t id = 0; id < index.size(); ++id) {
    if (index[id] >= 0) r.models[static_cast<std::size_t>(index[id])].tier_host_bytes += shared_host[id];
  }
  return r;
}

DurationHistogram Service::decode_histogram() {
  std::lock_guard<std::mutex> lock(mu_);
  return decode_hist_;
}

}  // namespace epk::daemon::server
