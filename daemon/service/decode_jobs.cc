// Uncached slots (daemon/service/service.h): a decode job per slot on its lane's scheduler (the device lane's one worker, or
// the service's CPU pool for host lanes), and the answers to the acquires that wait for it.
//
// A device lane answers its waiters as soon as the decode is on the stream (reply_early), each reply naming a status
// ticket that reads pending until the worker publishes the decode's outcome (docs/PROTOCOL.md,
// shm/decode_status.h); a host lane decodes on the CPU and answers once the slot is written (on_decoded). Either
// way the slot stays kDecoding in the cache until on_decoded: acquires arriving meanwhile join the in-flight entry's
// waiters, and a failed decode drops the slot (and the pins of the waiters already answered) there.
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <exception>

#include "daemon/log_format.h"
#include "daemon/service/service.h"

namespace epk::daemon::server {
namespace {

namespace asio = boost::asio;

// A producer that throws (bad_alloc on a decode temporary, say) fails this acquire; it must not take epkd down.
template <class Fn>
Status guarded(Fn&& produce) {
  try {
    return produce();
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInternal, std::string("decode failed: ") + e.what());
  } catch (...) {
    return make_error(ErrorCode::kInternal, "decode failed: unknown exception");
  }
}

// After a produce: a source whose file changed under its map (SIGBUS absorbed, codec/common/map_faults.h) may have
// produced from zeros. The slot is dropped; slots decoded before stay served; other models are untouched.
Error source_damaged(const ModelSource& src) {
  return make_error(ErrorCode::kIo, src.origin() + ": the file was truncated, replaced in place or unreadable under "
                                    "epkd; this model's uncached tensors cannot be served until it is fixed and "
                                    "epkd restarted (its cached tensors still are)");
}

void log_timeline(std::uint64_t slot_id, const Timeline& tl, bool early) {
  const std::int64_t written = now_ns();
  auto us = [](std::int64_t a, std::int64_t b) { return a != 0 && b != 0 ? (b - a) / 1e3 : -1.0; };
  spdlog::debug(
      "timeline slot {}{}: read {} ns; read->submit {:.1f} us, submit->worker {:.1f}, worker->enqueued {:.1f}, "
      "enqueued->done {:.1f}, worker->done {:.1f}, done->completion {:.1f}, completion->written {:.1f}; "
      "read->written {:.1f} us; written {} ns",
      slot_id, early ? " (early reply)" : "", tl.read, us(tl.read, tl.submit), us(tl.submit, tl.worker),
      us(tl.worker, tl.enqueued), us(tl.enqueued, tl.done), us(tl.worker, tl.done), us(tl.done, tl.completion),
      us(tl.completion, written), us(tl.read, written), written);
}

}  // namespace

// The caller holds mu_ and the lane's lock, and has just made `slot` (kDecoding) in the lane's cache.
Service::InFlight& Service::start_decode(Lane& lane, const Slot& slot, std::shared_ptr<const ModelSource> src,
                                         std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                                         ServedTensor desc, Priority prio) {
  const std::uint64_t slot_id = slot.id;
  GpuBackend* gpu = lane.gpu.get();
  // What the worker runs: the lane's GPU backend into the slot's device range, or the source into its host range.
  std::function<Status(bool* on_device, const std::function<void()>& on_enqueued)> produce;
  if (gpu != nullptr) {
    produce = [gpu, src = std::move(src), model = slot.key.model, tensor, layout, shard, offset = slot.offset,
               bytes = desc.bytes, slot_id](bool* on_device, const std::function<void()>& on_enqueued) {
      Status st = gpu->produce(model, *src, tensor, layout, shard, offset, bytes, slot_id, on_device, on_enqueued);
      return src->damaged() ? source_damaged(*src) : st;
    };
  } else {
    produce = [src = std::move(src), tensor, layout, shard, dst = lane.pool->host_span(slot.offset, desc.bytes)](
                  bool*, const std::function<void()>&) {
      Status st = shard.whole() ? src->produce(tensor, layout, dst) : src->produce_shard(tensor, layout, shard, dst);
      return src->damaged() ? source_damaged(*src) : st;
    };
  }
  const std::int64_t submit_ns = now_ns();
  auto job = decode_scheduler(lane).submit(
      [this, gpu, produce = std::move(produce), slot_id] {
        Timeline tl;
        auto t0 = Clock::now();
        tl.worker = now_ns();
        bool on_device = false;
        std::uint64_t ticket = shm::kNoTicket;
        std::function<void()> on_enqueued;
        if (gpu != nullptr) {
          // Runs inside produce() between the enqueue and the stream sync: it must not throw past it (the sync guards
          // the pinned buffers the queued copies read). A ticket begun before a throw is still published.
          on_enqueued = [&] {
            tl.enqueued = gpu->last_enqueued_ns();
            try {
              reply_early(slot_id, tl, &ticket);
            } catch (const std::exception& e) {
              spdlog::error("slot {}: early reply failed ({}); its waiters were not answered", slot_id, e.what());
            }
          };
        }
        Status st = guarded([&] { return produce(&on_device, on_enqueued); });
        tl.done = now_ns();
        tl.enqueued = on_device ? gpu->last_enqueued_ns() : 0;
        auto publish = [&] {
          if (ticket == shm::kNoTicket) return;
          status_.finish(ticket, static_cast<bool>(st));
          if (tl.enqueued != 0 && spdlog::should_log(spdlog::level::debug)) {
            spdlog::debug("timeline slot {}: status ticket {} published {} at {} ns; enqueued->published {:.1f} us",
                          slot_id, ticket, st ? "ok" : "failed", now_ns(), (now_ns() - tl.enqueued) / 1e3);
          }
        };
        const bool ok = static_cast<bool>(st);
        // A good decode is published before on_decoded marks the slot ready, so a hit answered later (no ticket) names
        // a checked decode; a failed one after on_decoded dropped the slot, so a client that reads "failed" finds the
        // slot and its pins gone (its release is refused, a new acquire decodes again).
        if (ok) publish();
        auto ns = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
        // The completion runs here, on the worker: a hop through an io thread would add a thread wake-up to every
        // miss. The replies are posted to their sessions' threads.
        on_decoded(slot_id, st, ns, tl);
        if (!ok) publish();
      },
      prio);
  InFlight& f = inflight_[slot_id];
  f.submit_ns = submit_ns;
  f.job = std::move(job);
  f.desc = std::move(desc);
  return f;
}

// Runs on the decode worker once the slot's work is on the stream: answers the acquires waiting now, each reply
// carrying a fresh status ticket that reads pending until the worker publishes the decode's outcome. *ticket_out: the
// ticket, set as soon as it is begun (kNoTicket when nobody was answered). The waiters leave the in-flight entry
// before any reply is made, so on_decoded never answers them too.
void Service::reply_early(std::uint64_t slot_id, const Timeline& worker_tl, std::uint64_t* ticket_out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inflight_.find(slot_id);
  if (it == inflight_.end() || it->second.waiters.empty()) return;
  InFlight& f = it->second;
  Lane& lane = lanes_[shm::handle_pool(slot_id)];
  std::lock_guard<LaneLock> ll(lane_mu(lane));  // hits change the lane's cache under this lock alone
  Slot* slot = lane.cache->find(slot_id);
  if (slot == nullptr) return;
  const std::vector<Waiter> waiters = std::move(f.waiters);
  f.waiters.clear();
  const std::uint64_t ticket = status_.begin();  // pending before any reply naming it goes out
  *ticket_out = ticket;
  Timeline tl = worker_tl;
  tl.read = f.read_ns;
  tl.submit = f.submit_ns;
  tl.done = tl.enqueued;  // the reply does not wait for the decode
  const bool timeline = tl.read != 0 && spdlog::should_log(spdlog::level::debug);
  for (const Waiter& w : waiters) {
    auto s = w.session.lock();
    if (!s) continue;
    std::vector<std::uint8_t> out;
    shm::AcquireReply r;
    r.status_ticket = ticket;
    encode_acquire_reply(w.request_id, lane, *slot, f.desc, &r, &out);
    if (timeline) tl.completion = now_ns();
    asio::post(s->executor(), [s, out = std::move(out), tl, timeline, slot_id] {
      s->send(out);
      if (timeline) log_timeline(slot_id, tl, true);
    });
  }
  f.read_ns = 0;
}

// One line per decode: at debug when it succeeded (a per-request line), at error when it failed.
void Service::log_decode(const Lane& lane, std::uint64_t slot_id, const Slot* slot, const InFlight& f, const Status& st,
                         std::uint64_t ns) {
  std::string what = "slot=" + std::to_string(slot_id);  // the slot is gone when the decode failed
  if (slot != nullptr) {
    const ModelEntry* model = registry_.get(slot->key.model);
    const auto& tensors = model != nullptr && model->source ? model->source->tensors() : std::vector<TensorMeta>{};
    what = "model=" + kv(model != nullptr ? model->name : "?") +
           " tensor=" + kv(slot->key.tensor < tensors.size() ? tensors[slot->key.tensor].name : "?") +
           " layout=" + std::string(shm::layout_name(slot->key.layout)) +
           (slot->key.shard.whole() ? std::string() : " shard=" + kv(shm::describe(slot->key.shard))) +
           " slot=" + std::to_string(slot_id);
  }
  const bool prefetch = f.read_ns == 0;
  if (st) {
    spdlog::debug("decoded {} pool={} device={} bytes={} us={:.1f} waiters={} prefetch={}", what, lane.pool_id,
                  lane.on_device() ? static_cast<int>(lane.served_device()) : -1, f.desc.bytes, ns / 1e3, f.waiters.size(), prefetch);
  } else {
    spdlog::error("decode_failed {} pool={} bytes={} us={:.1f} waiters={} prefetch={} error={}", what, lane.pool_id,
                  f.desc.bytes, ns / 1e3, f.waiters.size(), prefetch, kv(st.error().to_string()));
  }
}

// Runs on the decode worker that produced the slot; the replies go to their sessions' threads.
void Service::on_decoded(std::uint64_t slot_id, Status st, std::uint64_t ns, Timeline tl) {
  std::lock_guard<std::mutex> lock(mu_);
  ++decodes_;
  decode_ns_ += ns;
  decode_hist_.observe(ns);
  auto it = inflight_.find(slot_id);
  if (it == inflight_.end()) return;
  InFlight f = std::move(it->second);
  inflight_.erase(it);
  tl.read = f.read_ns;
  tl.submit = f.submit_ns;
  const bool timeline = tl.read != 0 && spdlog::should_log(spdlog::level::debug);
  Lane& lane = lanes_[shm::handle_pool(slot_id)];  // slot ids carry their pool (first_handle_of_pool)
  std::lock_guard<LaneLock> ll(lane_mu(lane));
  Slot* slot = lane.cache->find(slot_id);
  if (!st || spdlog::should_log(spdlog::level::debug)) log_decode(lane, slot_id, slot, f, st, ns);
  lane.cache->decoded(slot_id, static_cast<bool>(st));
  check(lane);
  for (const Waiter& w : f.waiters) {
    auto s = w.session.lock();
    if (!s) continue;  // its pins went with its socket
    std::vector<std::uint8_t> out;
    if (st && slot != nullptr) {
      shm::AcquireReply r;
      encode_acquire_reply(w.request_id, lane, *slot, f.desc, &r, &out);
    } else {
      shm::encode_error(
          w.request_id,
          {wire_status_for(st ? ErrorCode::kInternal : st.error().code), st ? "decode failed" : st.error().message},
          &out);
    }
    if (timeline) tl.completion = now_ns();
    asio::post(s->executor(), [s, out = std::move(out), tl, timeline, slot_id] {
      s->send(out);
      if (timeline) log_timeline(slot_id, tl, false);
    });
  }
}

}  // namespace epk::daemon::server
