// Acquire, prefetch and release (daemon/service/service.h): the cache, pins, release fences and waits for space.
//
// An acquire goes as far down this list as it must, and a cache hit allocates nothing:
//   1. the registry lookup and served() take no lock (Registry::get is lock-free, sources are const);
//   2. a slot that other clients hold pinned and this client has pinned before is pinned under the shared side of
//      its lane's lock (Cache::pin_shared: pin counts above zero change no structure);
//   3. a ready slot is pinned under the exclusive side of the lane's lock alone (Cache::acquire_ready);
//   4. a miss or a slot still decoding takes mu_ and then the lane's lock: a miss gets a slot and a decode job
//      (decode_jobs.cc), a slot decoding gets one more waiter; either is answered by the decode worker.
// A hit's reply is encoded without any lock: the slot is pinned for this client, only its own release or its end
// (both handled later on this session's thread) can let the slot go, and a slot's id and offset never change.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/basic_waitable_timer.hpp>
#include <exception>
#include <optional>

#include "daemon/service/service.h"

namespace epk::daemon::server {

void Service::on_acquire(Session& s, std::uint32_t req, const shm::AcquireRequest& m,
                         Clock::time_point waiting_since, unsigned attempt) {
  if (shutting_down_) return s.send_error(req, shm::WireStatus::kShuttingDown, "epkd is shutting down");
  const ModelEntry* model = registry_.get(m.model_id);
  if (model == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, "acquire: unknown model id");
  if (!may_use(s, *model)) return hide_model(s, req, "acquire", *model);
  auto t = model->tensor_index.find(m.tensor);
  if (t == model->tensor_index.end()) {
    if (model->retired.load(std::memory_order_acquire)) return model_gone(s, req, *model);
    return s.send_error(req, shm::WireStatus::kNotFound, "model '" + model->name + "': no tensor '" + m.tensor + "'");
  }
  Lane* lane = lane_for_device(lanes_, s.domain(), m.device);
  if (lane == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, device_not_served(m.device));
  // A retired model's source goes once its last slot has (sweep_retired, under mu_ after passing every lane's lock):
  // `retired` is checked under each lock before the source or a slot of the model is used, so a request that goes on
  // sees a live source, and a retired model gets no new pins. A shard (shm/shard.h) is checked against the tensor's
  // shape and resolved to a range under the same check: the key and the slot's bytes are the shard's.
  SlotKey key{m.model_id, static_cast<std::uint32_t>(t->second), m.layout, {}};
  std::optional<Result<ServedTensor>> served;
  std::string bad_shard;
  bool gone = false;
  {
    // No check() under the shared side: pin counts above zero change no structure, and verify() needs the exclusive
    // side.
    Slot* slot = nullptr;
    {
      SharedLaneGuard shared(lane_mu(*lane), s.io_index());
      gone = model->retired.load(std::memory_order_acquire);
      if (!gone) {
        auto shard = shm::resolve_shard(m.shard, model->source->tensors()[t->second].shape, m.tensor);
        if (!shard) {
          bad_shard = shard.error().message;
        } else {
          key.shard = *shard;
          served.emplace(shard->whole() ? model->source->served(t->second, m.layout)
                                        : model->source->served_shard(t->second, m.layout, *shard));
          if (*served) slot = lane->cache->pin_shared(key, s.id());
        }
      }
    }
    if (gone) {
      if (waiting_since != Clock::time_point{}) end_space_wait(waiting_since);  // a retry of a wait for space
      return model_gone(s, req, *model);
    }
    if (!bad_shard.empty()) {
      if (waiting_since != Clock::time_point{}) end_space_wait(waiting_since);
      return s.send_error(req, shm::WireStatus::kInvalidArgument, "model '" + model->name + "': " + bad_shard);
    }
    if (!*served) return s.send_error(req, wire_status_for(served->error().code), served->error().message);
    if (slot != nullptr) {
      count_hit(s.io_index(), *lane);
      return reply_hit(s, req, *lane, *slot, **served);
    }
  }
  std::unique_lock<LaneLock> ll(lane_mu(*lane));
  if (model->retired.load(std::memory_order_acquire)) {
    ll.unlock();
    if (waiting_since != Clock::time_point{}) end_space_wait(waiting_since);
    return model_gone(s, req, *model);
  }
  if (Slot* slot = lane->cache->acquire_ready(key, s.id(), s.peer().uid)) {
    check(*lane);
    ll.unlock();
    count_hit(s.io_index(), *lane);
    return reply_hit(s, req, *lane, *slot, **served);
  }
  ll.unlock();
  // Only a miss reads the clock: the timeline starts after the failed hit attempts, before the service lock.
  const std::int64_t t_read = now_ns();
  std::unique_lock<std::mutex> lock(mu_);
  ll.lock();
  if (shutting_down_) return s.send_error(req, shm::WireStatus::kShuttingDown, "epkd is shutting down");
  if (model->retired.load(std::memory_order_acquire)) {
    ll.unlock();
    lock.unlock();
    if (waiting_since != Clock::time_point{}) end_space_wait(waiting_since);
    return model_gone(s, req, *model);
  }
  auto lookup = lane->cache->acquire(key, (*served)->bytes, s.id(), s.peer().uid);
  if (!lookup) {
    std::string why = lookup.error().message;
    if (lookup.error().code == ErrorCode::kNoSpace) {
      const SpaceReport space = lane->cache->space_report((*served)->bytes);
      const bool in_time = waiting_since == Clock::time_point{} ||
                           Clock::now() - waiting_since < std::chrono::milliseconds(cfg_.space_wait_ms);
      if (space.can_wait() && in_time && cfg_.space_wait_ms > 0) {
        ll.unlock();
        lock.unlock();
        return wait_for_space(s, req, m, *lane, waiting_since, attempt);
      }
      if (space.can_wait()) {
        why += "; waited " + std::to_string(cfg_.space_wait_ms) + " ms for them to come free (space_wait_ms)";
      }
      log_blocked(s, *lane, space);
    }
    if (waiting_since != Clock::time_point{}) end_space_wait(waiting_since);
    return s.send_error(req, wire_status_for(lookup.error().code),
                        "model '" + model->name + "' tensor '" + m.tensor + "': " + why);
  }
  if (waiting_since != Clock::time_point{}) end_space_wait(waiting_since);
  check(*lane);
  Slot* slot = lookup->slot;
  switch (lookup->outcome) {
    case Cache::Outcome::kHit:
      // The write wakes the client: other sessions' requests need not wait for that system call.
      ll.unlock();
      lock.unlock();
      return reply_hit(s, req, *lane, *slot, **served);
    case Cache::Outcome::kPending: {
      auto f = inflight_.find(slot->id);
      if (f == inflight_.end()) {  // a decoding slot always has its in-flight entry; never throw on a bug
        (void)lane->cache->release(slot->id, s.id(), nullptr);
        return s.send_error(req, shm::WireStatus::kInternal, "acquire: decode state lost (bug)");
      }
      f->second.waiters.push_back({s.shared_from_this(), req});
      decode_scheduler(*lane).promote(f->second.job);  // a prefetch that an acquire now waits for
      break;
    }
    case Cache::Outcome::kMiss: {
      InFlight& f = start_decode(*lane, *slot, model->source, t->second, m.layout, key.shard, std::move(**served),
                                 Priority::kAcquire);
      f.waiters.push_back({s.shared_from_this(), req});
      f.read_ns = t_read;
      break;
    }
  }
}

// An acquire that will fit once unpinned slots still decoding or behind pending release fences come free (the
// client's own kernels may still be reading what it released): retried on its session's thread after 50 us, then at
// doubling intervals up to 2 ms, until space_wait_ms has passed since its first refusal. While any acquire of a lane
// waits, prefetches to that lane are dropped (they would take the space it waits for).
void Service::wait_for_space(Session& s, std::uint32_t req, const shm::AcquireRequest& m, const Lane& lane,
                             Clock::time_point since, unsigned attempt) {
  if (since == Clock::time_point{}) {
    since = Clock::now();
    space_waits_.fetch_add(1, std::memory_order_relaxed);
  }
  std::atomic<std::uint32_t>& waiters = space_waiters_[lane.pool_id];
  waiters.fetch_add(1, std::memory_order_relaxed);
  auto timer = std::make_shared<Timer>(s.executor());
  timer->expires_after(std::chrono::microseconds(std::min(50u << std::min(attempt, 6u), 2000u)));
  timer->async_wait([this, timer, &waiters, self = s.shared_from_this(), req, m, since, attempt](
                        boost::system::error_code ec) {
    waiters.fetch_sub(1, std::memory_order_relaxed);
    if (ec || !self->open()) return end_space_wait(since);
    try {  // outside the session's frame handling: nothing may escape into the io loop
      on_acquire(*self, req, m, since, attempt + 1);
    } catch (const std::exception& e) {
      self->send_error(req, shm::WireStatus::kInternal, std::string("acquire: ") + e.what());
    }
  });
}

void Service::end_space_wait(Clock::time_point since) {
  space_wait_ns_.fetch_add(static_cast<std::uint64_t>((Clock::now() - since).count()), std::memory_order_relaxed);
}

void Service::reply_hit(Session& s, std::uint32_t req, const Lane& lane, const Slot& slot, const ServedTensor& served) {
  encode_acquire_reply(req, lane, slot, served, &s.reply_scratch(), &s.scratch());
  s.send(s.scratch());
}

void Service::encode_acquire_reply(std::uint32_t req, const Lane& lane, const Slot& slot, const ServedTensor& desc,
                                   shm::AcquireReply* r, std::vector<std::uint8_t>* out) const {
  r->handle = slot.id;
  r->pool_id = lane.pool_id;
  r->dtype = static_cast<std::uint32_t>(desc.dtype);
  r->offset = slot.offset;
  r->bytes = desc.bytes;
  r->shape.assign(desc.shape.begin(), desc.shape.end());
  r->strides.assign(desc.strides.begin(), desc.strides.end());
  r->done_event = lane.event_for(slot.id);
  shm::encode_acquire_reply(req, *r, out);
  r->status_ticket = shm::kNoTicket;
}

void Service::count_hit(std::size_t io_index, const Lane& l) {
  std::atomic<std::uint64_t>& n = lane_hits_[io_index * lanes_.size() + l.pool_id].n;
  n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

std::uint64_t Service::lane_hits(const Lane& l) const {
  std::uint64_t sum = 0;
  for (std::size_t t = 0; t < io_threads_; ++t) {
    sum += lane_hits_[t * lanes_.size() + l.pool_id].n.load(std::memory_order_relaxed);
  }
  return sum;
}

// Queues decodes for the names not cached yet, in order, as far as they fit without taking space an acquire waits
// for; answers how many it queued.
void Service::on_prefetch(Session& s, std::uint32_t req, const shm::PrefetchRequest& m) {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint32_t queued = 0;
  const ModelEntry* model = registry_.get(m.model_id);
  if (model == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, "prefetch: unknown model id");
  if (!may_use(s, *model)) return hide_model(s, req, "prefetch", *model);
  if (model->retired.load()) return model_gone(s, req, *model);  // under mu_: its source is still here if not
  Lane* lane = lane_for_device(lanes_, s.domain(), m.device);
  if (lane == nullptr) return s.send_error(req, shm::WireStatus::kNotFound, device_not_served(m.device));
  std::unique_lock<LaneLock> ll(lane_mu(*lane));
  if (!shutting_down_) {
    for (std::size_t i = 0; i < m.tensors.size(); ++i) {
      // Never take space an acquire waits for: the rest of the list is dropped (counted).
      if (space_waiters_[lane->pool_id].load(std::memory_order_relaxed) != 0) {
        prefetches_dropped_ += m.tensors.size() - i;
        break;
      }
      auto t = model->tensor_index.find(m.tensors[i]);
      if (t == model->tensor_index.end()) continue;
      // A shard that does not fit this tensor skips it, as an unknown name does (a prefetch is a hint).
      auto shard = shm::resolve_shard(m.shard, model->source->tensors()[t->second].shape, m.tensors[i]);
      if (!shard) continue;
      auto served = shard->whole() ? model->source->served(t->second, m.layout)
                                   : model->source->served_shard(t->second, m.layout, *shard);
      if (!served) continue;
      auto lookup = lane->cache->acquire({m.model_id, static_cast<std::uint32_t>(t->second), m.layout, *shard},
                                         served->bytes, kNoClient);
      check(*lane);
      if (!lookup) {  // no space: later names would not fit either
        prefetches_dropped_ += m.tensors.size() - i;
        break;
      }
      if (lookup->outcome == Cache::Outcome::kMiss) {
        start_decode(*lane, *lookup->slot, model->source, t->second, m.layout, *shard, std::move(*served),
                     Priority::kPrefetch);
        ++queued;
        ++prefetches_;
      }
    }
  }
  ll.unlock();
  std::vector<std::uint8_t> out;
  shm::encode_prefetch_reply(req, {queued}, &out);
  s.send(out);
}

// A host-fence release takes the shared side of its lane's lock when other pins keep the slot pinned, else the
// exclusive side; it never takes mu_. A CUDA-event fence checks the pin under the lane lock, makes its fence
// (GpuBackend::client_fence) without any lock, then takes the lane lock again for Cache::release.
void Service::on_release(Session& s, std::uint32_t req, const shm::ReleaseRequest& m) {
  const std::uint32_t pool = shm::handle_pool(m.handle);
  if (pool >= lanes_.size() || lanes_[pool].domain != s.domain()) {
    return s.send_error(req, shm::WireStatus::kNotFound, "release: no pool " + std::to_string(pool) + " (handle)");
  }
  Lane& lane = lanes_[pool];
  if (m.fence == shm::FenceKind::kHostRelease) {
    bool released = false;
    {
      SharedLaneGuard shared(lane_mu(lane), s.io_index());
      released = lane.cache->unpin_shared(m.handle, s.id());
    }
    if (released) return reply_release(s, req, m);
  }
  std::unique_ptr<shm::Fence> fence;  // null: the host fence, complete when the release arrives
  std::unique_lock<LaneLock> ll(lane_mu(lane));
  if (m.fence == shm::FenceKind::kCudaEvent) {
    if (!lane.gpu) {
      return s.send_error(req, shm::WireStatus::kUnsupported, "release: CUDA event fences need a device pool");
    }
    // Only a pin this client holds may open an event and queue a wait on the device.
    Slot* held = lane.cache->find(m.handle);
    if (held == nullptr || held->pins_of(s.id()) == 0) {  // entries stay at 0 after a release
      return s.send_error(req, shm::WireStatus::kNotFound, "release: this client holds no pin on that handle");
    }
    // The slot's own fence (a side stream's wait on the client's event, then a daemon marker), made without the lock:
    // opening the event the first time is a driver call of its own, and the backend guards its own maps. The pin is
    // checked again by Cache::release below; this session's requests (and its drop) run on its one thread, so only
    // another client's traffic can run meanwhile, and it cannot take this client's pin.
    ll.unlock();
    auto made = lane.gpu->client_fence(s.id(), m.event);
    if (!made) return s.send_error(req, wire_status_for(made.error().code), made.error().message);
    fence = std::move(*made);
    ll.lock();
  }
  const bool timed = fence != nullptr;
  const auto t0 = timed ? Clock::now() : Clock::time_point{};
  Status st = lane.cache->release(m.handle, s.id(), std::move(fence));
  if (timed) {
    fence_releases_.fetch_add(1, std::memory_order_relaxed);
    fence_release_ns_.fetch_add(static_cast<std::uint64_t>((Clock::now() - t0).count()), std::memory_order_relaxed);
  }
  check(lane);
  if (!st) return s.send_error(req, wire_status_for(st.error().code), st.error().message);
  ll.unlock();  // the reply's write (and the client's wake-up) outside the lock
  reply_release(s, req, m);
}

void Service::reply_release(Session& s, std::uint32_t req, const shm::ReleaseRequest& m) {
  if ((m.flags & shm::kReleaseNoReply) != 0) return;
  shm::encode_empty(req,
                    static_cast<shm::MsgType>(static_cast<std::uint16_t>(shm::MsgType::kRelease) | shm::kReplyBit),
                    &s.scratch());
  s.send(s.scratch());
}

}  // namespace epk::daemon::server
