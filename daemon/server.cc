#include "daemon/server.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <atomic>
#include <chrono>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "codec/common/map_faults.h"
#include "daemon/cache.h"
#include "daemon/decode_scheduler.h"
#include "daemon/device_lanes.h"
#include "daemon/epk_source.h"
#include "daemon/gpu_backend.h"
#include "daemon/handler_memory.h"
#include "daemon/registry.h"
#include "daemon/lane_lock.h"
#include "daemon/peer_access.h"
#include "daemon/metrics.h"
#include "daemon/periodic.h"
#include "daemon/synthetic_source.h"
#include "daemon/systemd.h"
#include "shm/decode_status.h"
#include "shm/fd_passing.h"
#include "shm/pool.h"
#include "shm/protocol.h"

namespace epk::daemon {
namespace {

namespace asio = boost::asio;
// Sessions use the io_context's own executor type, not the type-erased any_io_executor: completions are then invoked
// directly, with no type-erased function (and its allocation) per operation.
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<asio::local::stream_protocol, Executor>;
using Clock = std::chrono::steady_clock;
using Timer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, Executor>;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// An uncached acquire's way through epkd (steady_clock ns), logged at debug level once its reply is written: where
// the time between the request and the reply goes (issue 6's device target).
struct Timeline {
  std::int64_t read = 0;        // the acquire handled on its session's io thread (its bytes just read)
  std::int64_t submit = 0;      // the decode job queued
  std::int64_t worker = 0;      // a decode worker took it
  std::int64_t enqueued = 0;    // device path: the work issued to the stream, the wait for it begins
  std::int64_t done = 0;        // the decode finished (device: the stream synchronised, status read)
  std::int64_t completion = 0;  // the completion took the service lock and encoded the replies
};

shm::WireStatus wire_status_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotFound: return shm::WireStatus::kNotFound;
    case ErrorCode::kUnsupported: return shm::WireStatus::kUnsupported;
    case ErrorCode::kNoSpace: return shm::WireStatus::kNoSpace;
    case ErrorCode::kPermission: return shm::WireStatus::kDenied;
    case ErrorCode::kQuota: return shm::WireStatus::kOverQuota;
    case ErrorCode::kBadInput:
    case ErrorCode::kChecksum:
    case ErrorCode::kCorruptTile: return shm::WireStatus::kDecodeFailed;
    case ErrorCode::kInvalidArgument: return shm::WireStatus::kBadMessage;
    default: return shm::WireStatus::kInternal;
  }
}

class Service;

// Replies not yet written to a client that does not read them: past this the session is dropped.
constexpr std::size_t kMaxPendingReplyBytes = 8u << 20;

// One connected client. Reads frames into a fixed buffer; a started frame (and the first hello) must arrive whole
// within the read timeout of its first byte (a client that trickles bytes does not extend it); idle time between
// frames is unlimited unless idle_timeout_ms is set (a client may hold pins while it computes). Replies are
// appended to one buffer and written in order by one write chain (what arrives while a write is out goes in the next).
// A cache hit allocates nothing here: the acquire request, the reply being encoded and both output buffers are the
// session's, reserved once.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `refusal`: non-empty when the peer may not be served (its credentials, or too many sessions of its uid): the
  // hello is answered with it (kDenied) and the session closes.
  Session(Socket sock, Service& svc, ClientId id, std::size_t io_index, int read_timeout_ms, int idle_timeout_ms,
          PeerCredentials peer, std::uint32_t domain, std::string refusal)
      : sock_(std::move(sock)),
        timer_(sock_.get_executor()),
        svc_(svc),
        id_(id),
        io_index_(io_index),
        read_timeout_ms_(read_timeout_ms),
        idle_timeout_ms_(idle_timeout_ms),
        peer_(std::move(peer)),
        domain_(domain),
        refusal_(std::move(refusal)),
        buf_(shm::kMaxMessage) {
    acquire_.tensor.reserve(shm::kMaxTensorName);
    reply_.shape.reserve(shm::kMaxDims);
    reply_.strides.reserve(shm::kMaxDims);
    scratch_.reserve(shm::kMaxMessage);
    pending_.reserve(shm::kMaxMessage);
    out_.reserve(shm::kMaxMessage);
  }

  ClientId id() const { return id_; }
  std::size_t io_index() const { return io_index_; }  // its io_context's (and thread's) index
  const PeerCredentials& peer() const { return peer_; }  // from the kernel at accept
  std::uint32_t domain() const { return domain_; }        // its trust domain: the only lanes it is served from
  // Session state is touched only on its own io_context's thread: other threads post to this executor.
  Socket::executor_type executor() { return sock_.get_executor(); }
  bool open() const { return open_ && !closing_; }

  static void start(const std::shared_ptr<Session>& self) {
    asio::dispatch(self->sock_.get_executor(), [self] { self->guarded([&] { self->read_more(); }); });
  }

  void send(std::span<const std::uint8_t> msg) {
    if (!open_) return;
    if (!writing_ && pending_.empty()) {
      // Nothing queued (every cache hit and release): one non-blocking send straight from the caller's buffer. No
      // copy into pending_, no asio write operation and no completion handler to run afterwards; only what the
      // socket did not take goes through the write chain below.
      ssize_t n;
      do {
        n = ::send(sock_.native_handle(), msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      } while (n < 0 && errno == EINTR);
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {  // the client is gone: as a failed async write
          close_now();
          return;
        }
        n = 0;
      }
      if (static_cast<std::size_t>(n) == msg.size()) return;
      msg = msg.subspan(static_cast<std::size_t>(n));
    }
    if (pending_.size() + msg.size() > kMaxPendingReplyBytes) {
      // A client that sends without reading its replies: drop it rather than buffer without bound.
      spdlog::warn("client {}: {} bytes of replies unread; closing the session", id_, pending_.size());
      closing_ = true;
      close_now();
      return;
    }
    pending_.insert(pending_.end(), msg.begin(), msg.end());
    if (!writing_) do_write();
  }

  // A reply that carries fds (SCM_RIGHTS): sent at once when nothing is queued, else after the queued replies, so
  // replies keep their order. One at a time: a second while one waits is refused (libepk waits for each reply).
  void send_with_fds(std::vector<std::uint8_t> msg, std::vector<int> fds) {
    if (!open_) return;
    if (writing_ || !pending_.empty()) {
      if (!fd_reply_.empty()) {
        std::vector<std::uint8_t> err;
        shm::encode_error(0, {shm::WireStatus::kBadMessage, "a reply with fds is already waiting"}, &err);
        send(err);
        closing_ = true;
        return;
      }
      fd_reply_ = std::move(msg);
      fd_reply_fds_ = std::move(fds);
      return;
    }
    Status st = shm::send_with_fds(sock_.native_handle(), msg, fds, read_timeout_ms_);
    if (!st) {
      spdlog::warn("client {}: reply with fds: {}", id_, st.error().to_string());
      closing_ = true;
      close_now();
    }
  }

  // The session's own buffers for encoding a reply on its thread (reused: no allocation per message).
  shm::AcquireReply& reply_scratch() { return reply_; }
  std::vector<std::uint8_t>& scratch() { return scratch_; }

  // Error reply, then the session closes once its queued replies are written.
  void fail(std::uint32_t request_id, shm::WireStatus status, const std::string& message);

  // Shutdown: stop reading; queued replies still go out, then the socket closes.
  void stop() {
    if (!open_) return;
    boost::system::error_code ec;
    sock_.shutdown(Socket::shutdown_receive, ec);
  }

 private:
  // Handles every complete frame in the buffer, then reads more (or ends the session).
  void read_more();
  void on_read(boost::system::error_code ec, std::size_t n);
  // Pins die with the connection; queued replies still go out before the socket closes.
  void end();
  // A session that throws still ends like any other: logged, and the client's pins dropped.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      end_after_exception(std::current_exception());
    }
  }
  void end_after_exception(std::exception_ptr e);
  void handle_frame(const shm::FrameHeader& h, std::span<const std::uint8_t> payload);
  void do_write();
  void close_now();
  // The read deadline after the bytes read so far: a message that began (or the hello awaited) must be whole by
  // read_timeout_ms after it began; between messages, idle_timeout_ms when set. `consumed`: frames were handled.
  void update_deadline(bool consumed);
  void arm_timer(std::chrono::milliseconds after);

  Socket sock_;
  Timer timer_;
  Service& svc_;
  ClientId id_;
  std::size_t io_index_;
  int read_timeout_ms_;
  int idle_timeout_ms_;
  PeerCredentials peer_;
  std::uint32_t domain_;
  std::string refusal_;
  Clock::time_point message_deadline_{};  // while partial_: when the started message must be whole
  std::vector<std::uint8_t> buf_;
  std::size_t have_ = 0;
  shm::AcquireRequest acquire_;        // decoded into in place: its tensor name keeps its capacity
  shm::AcquireReply reply_;            // encoded from in place
  std::vector<std::uint8_t> scratch_;  // one encoded reply
  std::vector<std::uint8_t> pending_;  // replies waiting for the write in progress
  std::vector<std::uint8_t> out_;      // the bytes being written
  bool writing_ = false;
  std::vector<std::uint8_t> fd_reply_;  // a reply with fds waiting for the queue to drain (send_with_fds)
  std::vector<int> fd_reply_fds_;       // its fds (owned elsewhere: the lane's tier, the model's file)
  bool closing_ = false;  // stop reading, close after the queue drains
  bool open_ = true;
  bool hello_done_ = false;
  std::uint64_t read_gen_ = 0;
  bool timed_out_ = false;
  bool partial_ = false;  // the read in progress continues a started message (or waits for hello): timed
  bool idle_timed_ = false;  // the armed timer is the idle timeout (not a started message's)
  bool gone_ = false;     // client_gone() has been called
  HandlerMemory read_memory_, write_memory_;  // the state of the read and of the write in progress
};

class Service {
 public:
  // `lanes` (daemon/device_lanes.h): one per pool. Evicted ranges keep their pages: the next slot there rewrites
  // them, and faulting them in again would cost more than the memory (the budget is the pool's size either way).
  Service(asio::io_context& io, const DaemonConfig& cfg, std::vector<Lane> lanes, std::size_t io_threads)
      : io_(io),
        cfg_(cfg),
        lanes_(std::move(lanes)),
        io_threads_(io_threads),
        lane_hits_(std::make_unique<HitCount[]>(io_threads * lanes_.size())),
        scheduler_(cfg.threads != 0 ? cfg.threads : std::max(1u, std::thread::hardware_concurrency())) {
    for (std::size_t i = 0; i < lanes_.size(); ++i) lane_locks_.push_back(std::make_unique<LaneLock>(io_threads));
    // Early replies (protocol version 4): device lanes answer an uncached acquire once its decode is on the stream,
    // with a status ticket the client waits for. Host lanes decode on the CPU before replying: no table needed.
    const bool devices = std::any_of(lanes_.begin(), lanes_.end(), [](const Lane& l) { return l.on_device(); });
    if (devices && cfg_.early_reply) {
      auto t = shm::StatusTable::create();
      if (t) {
        status_ = std::move(*t);
      } else {
        spdlog::warn("no decode status table ({}): device acquires are answered after their decode",
                     t.error().to_string());
      }
    }
  }
  ~Service() {
    // The device workers use their lane's backend and this service: joined before anything goes.
    for (Lane& l : lanes_) {
      if (l.gpu_scheduler) l.gpu_scheduler->stop();
    }
  }

  // Opens every configured model not yet in the registry; a model that fails is logged and skipped. Runs at start
  // (before serving) and on the reload thread, one call at a time, so nothing else adds models meanwhile; it never
  // runs on an io thread (a slow open must not stall sessions). The service lock is taken only to look a name
  // up and to publish the model: reading, checksumming and uploading a model must not stall the sessions' acquires.
  bool known(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return registry_.find(name).has_value();
  }

  std::size_t open_models(const DaemonConfig& cfg) {
    std::size_t opened = 0;
    for (const ModelSpec& m : cfg.models) {
      if (known(m.name)) continue;
      auto t0 = Clock::now();
      auto src = open_epk_source(m.path, {cfg.resident_compressed, {}});
      if (!src) {
        spdlog::error("model '{}' refused: {}", m.name, src.error().to_string());
        continue;
      }
      if (cfg.resident_compressed) {
        spdlog::info("model '{}': resident in memory, read and checksummed in {:.1f} ms", m.name,
                     std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      opened += add_model(m.name, std::shared_ptr<const ModelSource>(std::move(*src)), m.access);
    }
    for (const ModelSpec& m : cfg.synthetic) {
      if (known(m.name)) continue;
      auto src = SyntheticSource::create(m.path, std::chrono::microseconds(cfg.synthetic_delay_us));
      if (!src) {
        spdlog::error("synthetic model '{}' refused: {}", m.name, src.error().to_string());
        continue;
      }
      spdlog::warn("model '{}' is SYNTHETIC test data ({} tensors), not a checkpoint", m.name,
                   (*src)->tensors().size());
      opened += add_model(m.name, std::shared_ptr<const ModelSource>(std::move(*src)), m.access);
    }
    return opened;
  }

  std::size_t model_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return registry_.size();
  }
  const DaemonConfig& config() const { return cfg_; }

  // Whether `peer` may be served, checked at accept: why not (the hello's kDenied answer) or empty. Counts the
  // session against its uid until client_gone, admitted or not (a refused session still lives until its answer).
  std::string admit(const PeerCredentials& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    std::uint32_t& open = sessions_per_uid_[peer.uid];
    ++open;
    if (!allows(cfg_.access, peer)) {
      return "access denied: " + describe(peer) + " is not allowed to connect (allowed_uids / allowed_gids)";
    }
    if (open > cfg_.max_sessions_per_uid) {
      return "uid " + std::to_string(peer.uid) + " already has " + std::to_string(open - 1) +
             " sessions open (max_sessions_per_uid = " + std::to_string(cfg_.max_sessions_per_uid) + ")";
    }
    return {};
  }

  void add_session(const std::shared_ptr<Session>& s) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[s->id()] = s;
  }
  ClientId next_client_id() { return next_client_.fetch_add(1); }

  // Whether shutdown gave up waiting for release fences (run_daemon then skips the device teardown).
  bool release_fences_left() const { return fences_left_; }
  // Whether any device still has release fences or side-stream waits pending now (after the io threads stopped: a
  // release read after shutdown's wait may have queued one).
  bool release_fences_pending() {
    for (Lane& l : lanes_) {
      if (l.gpu && l.gpu->pending_fences() != 0) return true;
    }
    return false;
  }

  bool invariant_broken() const { return invariant_broken_.load(); }

  void client_gone(ClientId id, uid_t uid) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto u = sessions_per_uid_.find(uid); u != sessions_per_uid_.end() && --u->second == 0) {
        sessions_per_uid_.erase(u);
      }
      for (Lane& l : lanes_) {
        std::lock_guard<LaneLock> ll(lane_mu(l));
        l.cache->drop_client(id);
        check(l);
      }
      sessions_.erase(id);
      spdlog::debug("client {} gone; its pins dropped", id);
      if (shutting_down_ && sessions_.empty() && on_drained_) on_drained_();
    }
    // Its opened events and side streams (GpuBackend guards its own maps): destroying them must not stall the hits
    // of other clients on the lane locks. Its fences stay on their slots.
    for (Lane& l : lanes_) {
      if (l.gpu) l.gpu->drop_client(id);
    }
  }

  // The pools of `domain` only: a client never receives another domain's pool fds (docs/SECURITY.md).
  shm::HelloReply hello_reply(std::uint32_t domain) const {
    shm::HelloReply r;
    for (const Lane& l : lanes_) {
      if (l.domain != domain) continue;
      r.pools.push_back({l.pool_id, l.pool->kind(), l.pool->device(), l.pool->size()});
      if (l.gpu) r.events.insert(r.events.end(), l.gpu->event_handles().begin(), l.gpu->event_handles().end());
    }
    r.status_entries = status_.valid() ? status_.entries() : 0;
    return r;
  }
  // In pool order, as the hello reply lists them, then the status table's when there is one.
  std::vector<int> pool_fds(std::uint32_t domain) const {
    std::vector<int> fds;
    for (const Lane& l : lanes_) {
      if (l.domain == domain) fds.push_back(l.pool->export_fd());
    }
    if (status_.valid()) fds.push_back(status_.fd());
    return fds;
  }

  // The on_* handlers run on the calling session's thread and answer it directly.
  void on_open_model(Session& s, std::uint32_t req, const shm::OpenModelRequest& m) {
    std::lock_guard<std::mutex> lock(mu_);
    auto id = registry_.find(m.model);
    if (!id) {
      send_error(s, req, shm::WireStatus::kNotFound, "model '" + m.model + "' is not served here");
      return;
    }
    if (!may_use(s, *registry_.get(*id))) return deny_model(s, req, m.model);
    std::vector<std::uint8_t> out;
    shm::encode_open_model_reply(req, {*id, static_cast<std::uint32_t>(registry_.get(*id)->source->tensors().size())},
                                 &out);
    s.send(out);
  }

  // Client-side decode: the model file (read-only) and the model's compressed tier on the device, for a client that
  // decodes in its own CUDA context. Only root, epkd's own uid and cfg.client_decode get them: the tier is mapped
  // writable (docs/SECURITY.md).
  void on_open_stored(Session& s, std::uint32_t req, const shm::OpenStoredRequest& m) {
    const PeerCredentials& peer = s.peer();
    if (peer.uid != 0 && peer.uid != ::geteuid() && !lists(cfg_.client_decode, peer)) {
      spdlog::warn("client {} ({}): open_stored refused (client_decode_uids / client_decode_gids)", s.id(),
                   describe(peer));
      return send_error(s, req, shm::WireStatus::kDenied,
                        "access denied: " + describe(peer) +
                            " may not decode in its own context (client_decode_uids / client_decode_gids); acquire "
                            "the tensors instead");
    }
    const ModelEntry* model = registry_.get(m.model_id);
    if (model == nullptr) return send_error(s, req, shm::WireStatus::kNotFound, "open_stored: unknown model id");
    if (!may_use(s, *model)) return deny_model(s, req, model->name);
    Lane* lane = lane_for_device(lanes_, s.domain(), m.device);
    if (lane == nullptr) return send_error(s, req, shm::WireStatus::kNotFound, device_not_served(m.device));
    std::optional<GpuBackend::TierExport> tier = lane->gpu ? lane->gpu->tier(m.model_id) : std::nullopt;
    const int file = model->source->file_fd();
    if (!tier || file < 0) {
      return send_error(s, req, shm::WireStatus::kUnsupported,
                        "model '" + model->name + "' has no compressed tier on device " + std::to_string(m.device) +
                            (lane->gpu ? " (no lattice-rans tensor, or not an .epk file)" : " (a host pool serves it)"));
    }
    std::vector<std::uint8_t> out;
    shm::encode_open_stored_reply(req, {tier->bytes}, &out);
    s.send_with_fds(std::move(out), {file, tier->fd});
  }

  // The registry lookup and served() take no lock (Registry::get is lock-free, sources are const). With lane locks
  // (the default) a hit then holds only its lane's lock, for the pin: the shared side when other clients hold pins on
  // the slot and this client has pinned it before (shared_hits), else the exclusive side; a miss or a slot still
  // decoding takes the service lock and then the lane's (always in that order), as every acquire did before
  // (cfg.lane_locks = false).
  // `waiting_since`: set when this is the retry of an acquire that waited for space (wait_for_space), else epoch.
  void on_acquire(Session& s, std::uint32_t req, const shm::AcquireRequest& m,
                  Clock::time_point waiting_since = {}, unsigned attempt = 0) {
    // Hits read no clock and touch no reference count: the miss timeline's "read" time and the waiter's shared_ptr are
    // taken on the paths that need them (with lane locks the timeline starts after the failed hit attempt, before the
    // service lock).
    std::int64_t t_read = cfg_.lane_locks ? 0 : now_ns();
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    if (!cfg_.lane_locks) lock.lock();
    if (shutting_down_) return send_error(s, req, shm::WireStatus::kShuttingDown, "epkd is shutting down");
    const ModelEntry* model = registry_.get(m.model_id);
    if (model == nullptr) return send_error(s, req, shm::WireStatus::kNotFound, "acquire: unknown model id");
    if (!may_use(s, *model)) return deny_model(s, req, model->name);
    auto t = model->tensor_index.find(m.tensor);
    if (t == model->tensor_index.end()) {
      return send_error(s, req, shm::WireStatus::kNotFound,
                        "model '" + model->name + "': no tensor '" + m.tensor + "'");
    }
    Lane* lane = lane_for_device(lanes_, s.domain(), m.device);
    if (lane == nullptr) return send_error(s, req, shm::WireStatus::kNotFound, device_not_served(m.device));
    auto served = model->source->served(t->second, m.layout);
    if (!served) return send_error(s, req, wire_status_for(served.error().code), served.error().message);
    SlotKey key{m.model_id, static_cast<std::uint32_t>(t->second), m.layout};
    if (cfg_.lane_locks && cfg_.shared_hits) {
      // Another client holds a pin on the slot and this one has pinned it before: the shared side of the lane lock.
      // No check() here: pin counts above zero change no structure, and verify() needs the exclusive side.
      Slot* slot = nullptr;
      {
        SharedLaneGuard shared(lane_mu(*lane), s.io_index());
        slot = lane->cache->pin_shared(key, s.id());
      }
      if (slot != nullptr) {
        count_hit(s.io_index(), *lane);
        return reply_hit(s, req, *lane, *slot, *served);
      }
    }
    std::unique_lock<LaneLock> ll(lane_mu(*lane));
    if (cfg_.lane_locks) {
      if (Slot* slot = lane->cache->acquire_ready(key, s.id())) {
        check(*lane);
        ll.unlock();
        count_hit(s.io_index(), *lane);
        // Pinned for this client: only its own release or its end, both handled later on this thread, can let the
        // slot go, and a slot's id and offset never change, so its reply is encoded without the lock.
        return reply_hit(s, req, *lane, *slot, *served);
      }
      ll.unlock();
      t_read = now_ns();
      lock.lock();
      ll.lock();
      if (shutting_down_) return send_error(s, req, shm::WireStatus::kShuttingDown, "epkd is shutting down");
    }
    auto lookup = lane->cache->acquire(key, served->bytes, s.id());
    if (!lookup) {
      std::string why = lookup.error().message;
      if (lookup.error().code == ErrorCode::kNoSpace) {
        const SpaceReport space = lane->cache->space_report(served->bytes);
        const bool in_time = waiting_since == Clock::time_point{} ||
                             Clock::now() - waiting_since < std::chrono::milliseconds(cfg_.space_wait_ms);
        if (space.can_wait() && in_time && cfg_.space_wait_ms > 0) {
          ll.unlock();
          if (lock.owns_lock()) lock.unlock();
          return wait_for_space(s, req, m, *lane, waiting_since, attempt);
        }
        if (space.can_wait()) {
          why += "; waited " + std::to_string(cfg_.space_wait_ms) + " ms for them to come free (space_wait_ms)";
        }
      }
      if (waiting_since != Clock::time_point{}) end_space_wait(waiting_since);
      return send_error(s, req, wire_status_for(lookup.error().code),
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
        return reply_hit(s, req, *lane, *slot, *served);
      case Cache::Outcome::kPending: {
        auto f = inflight_.find(slot->id);
        if (f == inflight_.end()) {  // a decoding slot always has its in-flight entry; never throw on a bug
          (void)lane->cache->release(slot->id, s.id(), nullptr);
          return send_error(s, req, shm::WireStatus::kInternal, "acquire: decode state lost (bug)");
        }
        f->second.waiters.push_back({s.shared_from_this(), req});
        decode_scheduler(*lane).promote(f->second.job);  // a prefetch that an acquire now waits for
        break;
      }
      case Cache::Outcome::kMiss: {
        InFlight& f =
            start_decode(*lane, *slot, model->source, t->second, m.layout, std::move(*served), Priority::kAcquire);
        f.waiters.push_back({s.shared_from_this(), req});
        f.read_ns = t_read;
        break;
      }
    }
  }

  // An acquire that will fit once unpinned slots still decoding or behind pending release fences come free (the
  // client's own kernels may still be reading what it released): retried on its session's thread after 50 us, then
  // at doubling intervals up to 2 ms, until space_wait_ms has passed since its first refusal. While any acquire of a
  // lane waits, prefetches to that lane are dropped (they would take the space it waits for).
  void wait_for_space(Session& s, std::uint32_t req, const shm::AcquireRequest& m, const Lane& lane,
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
        send_error(*self, req, shm::WireStatus::kInternal, std::string("acquire: ") + e.what());
      }
    });
  }
  void end_space_wait(Clock::time_point since) {
    space_wait_ns_.fetch_add(static_cast<std::uint64_t>((Clock::now() - since).count()), std::memory_order_relaxed);
  }

  void reply_hit(Session& s, std::uint32_t req, const Lane& lane, const Slot& slot, const ServedTensor& served) {
    encode_acquire_reply(req, lane, slot, served, &s.reply_scratch(), &s.scratch());
    s.send(s.scratch());
  }

  void on_prefetch(Session& s, std::uint32_t req, const shm::PrefetchRequest& m) {
    std::lock_guard<std::mutex> lock(mu_);
    std::uint32_t queued = 0;
    const ModelEntry* model = registry_.get(m.model_id);
    if (model == nullptr) return send_error(s, req, shm::WireStatus::kNotFound, "prefetch: unknown model id");
    if (!may_use(s, *model)) return deny_model(s, req, model->name);
    Lane* lane = lane_for_device(lanes_, s.domain(), m.device);
    if (lane == nullptr) return send_error(s, req, shm::WireStatus::kNotFound, device_not_served(m.device));
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
        auto served = model->source->served(t->second, m.layout);
        if (!served) continue;
        auto lookup = lane->cache->acquire({m.model_id, static_cast<std::uint32_t>(t->second), m.layout},
                                           served->bytes, kNoClient);
        check(*lane);
        if (!lookup) {  // no space: later names would not fit either
          prefetches_dropped_ += m.tensors.size() - i;
          break;
        }
        if (lookup->outcome == Cache::Outcome::kMiss) {
          start_decode(*lane, *lookup->slot, model->source, t->second, m.layout, std::move(*served),
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
  // exclusive side (with lane locks). A CUDA-event fence checks the pin under the lane lock, makes its fence
  // (GpuBackend::client_fence) without any lock, then takes the lane lock again for Cache::release.
  void on_release(Session& s, std::uint32_t req, const shm::ReleaseRequest& m) {
    const std::uint32_t pool = shm::handle_pool(m.handle);
    if (pool >= lanes_.size() || lanes_[pool].domain != s.domain()) {
      return send_error(s, req, shm::WireStatus::kNotFound, "release: no pool " + std::to_string(pool) + " (handle)");
    }
    Lane& lane = lanes_[pool];
    bool released = false;
    if (cfg_.lane_locks && cfg_.shared_hits && m.fence == shm::FenceKind::kHostRelease) {
      SharedLaneGuard shared(lane_mu(lane), s.io_index());
      released = lane.cache->unpin_shared(m.handle, s.id());
    }
    if (released) return reply_release(s, req, m);
    std::unique_ptr<shm::Fence> fence;  // null: the host fence, complete when the release arrives
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    if (!cfg_.lane_locks) lock.lock();
    std::unique_lock<LaneLock> ll(lane_mu(lane));
    if (m.fence == shm::FenceKind::kCudaEvent) {
      if (!lane.gpu) {
        return send_error(s, req, shm::WireStatus::kUnsupported, "release: CUDA event fences need a device pool");
      }
      // Only a pin this client holds may open an event and queue a wait on the device.
      Slot* held = lane.cache->find(m.handle);
      if (held == nullptr || held->pins_of(s.id()) == 0) {  // entries stay at 0 after a release
        return send_error(s, req, shm::WireStatus::kNotFound, "release: this client holds no pin on that handle");
      }
      // The slot's own fence (a side stream's wait on the client's event, then a daemon marker), made without the
      // locks: opening the event the first time is a driver call of its own, and the backend guards its own maps.
      // The pin is checked again by Cache::release below; this session's requests (and its drop) run on its one
      // thread, so only another client's traffic can run meanwhile, and it cannot take this client's pin.
      ll.unlock();
      if (lock.owns_lock()) lock.unlock();
      auto made = lane.gpu->client_fence(s.id(), m.event);
      if (!made) return send_error(s, req, wire_status_for(made.error().code), made.error().message);
      fence = std::move(*made);
      if (!cfg_.lane_locks) lock.lock();  // the order as above: service lock, then lane lock
      ll.lock();
    }
    const bool timed = fence != nullptr;
    const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    Status st = lane.cache->release(m.handle, s.id(), std::move(fence));
    if (timed) {
      fence_releases_.fetch_add(1, std::memory_order_relaxed);
      fence_release_ns_.fetch_add(static_cast<std::uint64_t>((std::chrono::steady_clock::now() - t0).count()),
                                  std::memory_order_relaxed);
    }
    check(lane);
    if (!st) return send_error(s, req, wire_status_for(st.error().code), st.error().message);
    ll.unlock();  // the reply's write (and the client's wake-up) outside the locks
    if (lock.owns_lock()) lock.unlock();
    reply_release(s, req, m);
  }

  static void reply_release(Session& s, std::uint32_t req, const shm::ReleaseRequest& m) {
    if ((m.flags & shm::kReleaseNoReply) != 0) return;
    shm::encode_empty(req,
                      static_cast<shm::MsgType>(static_cast<std::uint16_t>(shm::MsgType::kRelease) | shm::kReplyBit),
                      &s.scratch());
    s.send(s.scratch());
  }

  void on_stats(Session& s, std::uint32_t req) {
    std::vector<std::uint8_t> out;
    shm::encode_stats_reply(req, stats(), &out);
    s.send(out);
  }

  // Every pool's cache counters and the service's, as the stats message carries them (also systemd's STATUS=).
  shm::StatsReply stats() {
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

  void on_models(Session& s, std::uint32_t req) {
    std::vector<std::uint8_t> out;
    shm::encode_models_reply(req, models_info(&s.peer()), &out);
    s.send(out);
  }

  // Every model with its cached slots and bytes over the pools (a walk over each lane's slots under its lock).
  // `peer`: only the models it may use (a client's models list: the others' names and occupancy are not its
  // business); null: every model (metrics).
  shm::ModelsReply models_info(const PeerCredentials* peer = nullptr) {
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

  DurationHistogram decode_histogram() {
    std::lock_guard<std::mutex> lock(mu_);
    return decode_hist_;
  }

  static bool may_use(const PeerCredentials& peer, const ModelEntry& model) {
    return model.access.open() || allows(model.access, peer);
  }
  static bool may_use(const Session& s, const ModelEntry& model) { return may_use(s.peer(), model); }
  static void deny_model(Session& s, std::uint32_t req, const std::string& model) {
    spdlog::warn("client {} ({}): model '{}' refused by its uids/gids rule", s.id(), describe(s.peer()), model);
    send_error(s, req, shm::WireStatus::kDenied,
               "access denied: model '" + model + "' is not served to " + describe(s.peer()) + " (its uids/gids)");
  }

  static void send_error(Session& s, std::uint32_t req, shm::WireStatus status, const std::string& msg) {
    std::vector<std::uint8_t> out;
    shm::encode_error(req, {status, msg}, &out);
    s.send(out);
  }

  // SIGTERM: finish decodes in flight (their waiters get answers), then stop every session. `on_drained` runs once
  // the last session has ended (at once if there is none), on some session's thread or the main one.
  void shutdown(std::function<void()> on_drained) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutting_down_ = true;
      on_drained_ = std::move(on_drained);
    }
    for (Lane& l : lanes_) {
      if (l.gpu_scheduler) l.gpu_scheduler->drain();  // their CPU fallbacks do not use the CPU scheduler
    }
    scheduler_.drain();  // without the lock: the workers' completions take it
    scheduler_.stop();
    for (Lane& l : lanes_) {
      if (l.gpu_scheduler) l.gpu_scheduler->stop();
    }
    wait_for_release_fences();
    // The drained completions have posted their replies to the sessions' contexts: the stop goes through the main
    // context and is posted to each session after them, so the replies go out first.
    asio::post(io_, [this] {
      std::lock_guard<std::mutex> lock(mu_);
      if (const std::uint64_t n = fence_releases_.load(); n != 0) {
        std::size_t held = 0;
        for (const Lane& l : lanes_) {
          std::lock_guard<LaneLock> ll(lane_mu(l));
          held += l.cache->fences_held();
        }
        spdlog::info("event-fence releases: {}, Cache::release {:.2f} us mean, fences held on slots now {}", n,
                     static_cast<double>(fence_release_ns_.load()) / 1e3 / static_cast<double>(n), held);
      }
      for (const Lane& l : lanes_) {
        std::lock_guard<LaneLock> ll(lane_mu(l));
        if (Status v = l.cache->verify(); !v) {
          spdlog::error("pool {}: {}", l.pool_id, v.error().to_string());
          invariant_broken_ = true;
        }
      }
      for (auto& [id, w] : sessions_) {
        if (auto sp = w.lock()) asio::post(sp->executor(), [sp] { sp->stop(); });
      }
      if (sessions_.empty() && on_drained_) on_drained_();
    });
  }

 private:
  // At shutdown: release fences not yet complete mean a client's kernels may still read their slots. Nothing in epkd
  // waits on them (the decode streams never do, and the side streams and markers are destroyed without waiting), so
  // a client that hangs cannot hold the exit: wait a little for the common case, then log what is left and go on.
  void wait_for_release_fences() {
    constexpr auto kWait = std::chrono::milliseconds(500);
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    for (Lane& l : lanes_) {
      if (!l.gpu) continue;
      std::size_t pending = l.gpu->pending_fences();
      while (pending != 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        pending = l.gpu->pending_fences();
      }
      if (pending != 0) {
        spdlog::warn("pool {}: {} release fence(s) still pending after {} ms (clients' kernels not finished); exiting "
                     "without waiting for them",
                     l.pool_id, pending, kWait.count());
        fences_left_ = true;
      }
    }
  }

  struct Waiter {
    std::weak_ptr<Session> session;
    std::uint32_t request_id;
  };
  struct InFlight {
    DecodeScheduler::JobPtr job;
    ServedTensor desc;
    std::vector<Waiter> waiters;
    std::int64_t read_ns = 0, submit_ns = 0;  // the first acquire's Timeline (0 for a prefetch)
  };

  // The caller holds `l`'s lane lock; each operation changes one lane's cache, and checks that one.
  void check(const Lane& l) {
    if (!cfg_.check_invariants || invariant_broken_) return;
    if (Status v = l.cache->verify(); !v) {
      spdlog::critical("pool {}: {}", l.pool_id, v.error().to_string());
      invariant_broken_ = true;
    }
  }

  LaneLock& lane_mu(const Lane& l) const { return *lane_locks_[l.pool_id]; }

  // Hits taken by acquire_ready, counted per io thread and lane: each counter has one writer (the thread that runs
  // that context's sessions), so a hit writes no line that other threads' hits write. Summed for stats.
  void count_hit(std::size_t io_index, const Lane& l) {
    std::atomic<std::uint64_t>& n = lane_hits_[io_index * lanes_.size() + l.pool_id].n;
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::uint64_t lane_hits(const Lane& l) const {
    std::uint64_t sum = 0;
    for (std::size_t t = 0; t < io_threads_; ++t) {
      sum += lane_hits_[t * lanes_.size() + l.pool_id].n.load(std::memory_order_relaxed);
    }
    return sum;
  }

  static std::string device_not_served(std::uint32_t device) {
    return "device " + std::to_string(device) + " is not served by this epkd";
  }

  std::size_t add_model(const std::string& name, std::shared_ptr<const ModelSource> src, const AccessRule& access) {
    std::string origin = src->origin();
    std::size_t n = src->tensors().size();
    std::shared_ptr<const ModelSource> kept = src;
    Result<std::uint32_t> id = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return registry_.add(name, std::move(src), access);
    }();
    if (!id) {
      spdlog::error("model '{}' refused: {}", name, id.error().to_string());
      return 0;
    }
    // Outside the service lock: until a device's tier is published, its acquires of this model take the CPU fallback.
    for (Lane& l : lanes_) {
      if (!l.gpu || !cfg_.device_resident) continue;
      // Resident compressed tier, at open, on every served device (eager: an uncached acquire on any device is one
      // kernel). A model whose tensors cannot be made resident there still serves (CPU decoder and a copy), but says
      // so.
      auto added = l.gpu->add_model(*id, kept);
      if (!added) {
        spdlog::error("model '{}': resident tier on device {} failed ({}); its tensors decode on the CPU there", name,
                      l.gpu->device(), added.error().to_string());
      } else {
        spdlog::info("model '{}': {} MiB resident on device {}", name, *added >> 20, l.gpu->device());
      }
    }
    spdlog::info("model '{}' (id {}) from {}: {} tensors", name, *id, origin, n);
    return 1;
  }

  // A producer that throws (bad_alloc on a decode temporary, say) fails this acquire; it must not take epkd down.
  template <class Fn>
  static Status guarded(Fn&& produce) {
    try {
      return produce();
    } catch (const std::exception& e) {
      return make_error(ErrorCode::kInternal, std::string("decode failed: ") + e.what());
    } catch (...) {
      return make_error(ErrorCode::kInternal, "decode failed: unknown exception");
    }
  }

  DecodeScheduler& decode_scheduler(Lane& lane) { return lane.gpu_scheduler ? *lane.gpu_scheduler : scheduler_; }

  // After a produce: a source whose file changed under its map (SIGBUS absorbed, codec/common/map_faults.h) may have
  // produced from zeros. The slot is dropped; slots decoded before stay served; other models are untouched.
  static Error source_damaged(const ModelSource& src) {
    return make_error(ErrorCode::kIo, src.origin() + ": the file was truncated, replaced in place or unreadable under "
                                      "epkd; this model's uncached tensors cannot be served until it is fixed and "
                                      "epkd restarted (its cached tensors still are)");
  }

  InFlight& start_decode(Lane& lane, const Slot& slot, std::shared_ptr<const ModelSource> src, std::size_t tensor,
                         shm::Layout layout, ServedTensor desc, Priority prio) {
    const std::uint64_t slot_id = slot.id;
    GpuBackend* gpu = lane.gpu.get();
    // What the worker runs: the lane's GPU backend into the slot's device range, or the source into its host range.
    std::function<Status(bool* on_device, const std::function<void()>& on_enqueued)> produce;
    if (gpu != nullptr) {
      produce = [gpu, src = std::move(src), model = slot.key.model, tensor, layout, offset = slot.offset,
                 bytes = desc.bytes, slot_id](bool* on_device, const std::function<void()>& on_enqueued) {
        Status st = gpu->produce(model, *src, tensor, layout, offset, bytes, slot_id, on_device, on_enqueued);
        return src->damaged() ? source_damaged(*src) : st;
      };
    } else {
      produce = [src = std::move(src), tensor, layout, dst = lane.pool->host_span(slot.offset, desc.bytes)](
                    bool*, const std::function<void()>&) {
        Status st = src->produce(tensor, layout, dst);
        return src->damaged() ? source_damaged(*src) : st;
      };
    }
    const bool early = gpu != nullptr && status_.valid();
    const std::int64_t submit_ns = now_ns();
    auto job = decode_scheduler(lane).submit(
        [this, gpu, produce = std::move(produce), slot_id, early] {
          Timeline tl;
          auto t0 = Clock::now();
          tl.worker = now_ns();
          bool on_device = false;
          std::uint64_t ticket = shm::kNoTicket;
          std::function<void()> on_enqueued;
          if (early) {
            // Runs inside produce() between the enqueue and the stream sync: it must not throw past it (the sync
            // guards the pinned buffers the queued copies read). A ticket begun before a throw is still published.
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
          // A good decode is published before on_decoded marks the slot ready, so a hit answered later (no ticket)
          // names a checked decode; a failed one after on_decoded dropped the slot, so a client that reads "failed"
          // finds the slot and its pins gone (its release is refused, a new acquire decodes again).
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
  // carrying a fresh status ticket that reads pending until the worker publishes the decode's outcome. The slot stays
  // kDecoding in the cache meanwhile (acquires arriving now wait for on_decoded; a failed decode drops the slot and
  // the early waiters' pins with it). *ticket: the ticket, set as soon as it is begun (kNoTicket when nobody was
  // answered). The waiters leave the in-flight entry before any reply is made, so on_decoded never answers them too.
  void reply_early(std::uint64_t slot_id, const Timeline& worker_tl, std::uint64_t* ticket_out) {
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

  // Runs on the decode worker that produced the slot; the replies go to their sessions' threads.
  void on_decoded(std::uint64_t slot_id, Status st, std::uint64_t ns, Timeline tl) {
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
    if (!st) spdlog::error("decode failed: {}", st.error().to_string());
    Lane& lane = lanes_[shm::handle_pool(slot_id)];  // slot ids carry their pool (first_handle_of_pool)
    std::lock_guard<LaneLock> ll(lane_mu(lane));
    Slot* slot = lane.cache->find(slot_id);
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

  static void log_timeline(std::uint64_t slot_id, const Timeline& tl, bool early) {
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

  void encode_acquire_reply(std::uint32_t req, const Lane& lane, const Slot& slot, const ServedTensor& desc,
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
    r->status_ticket = shm::kNoTicket;  // the session's reused reply: a ticket belongs to one early answer
  }

  asio::io_context& io_;  // the main context: shutdown steps run there
  // Lock order: mu_, then a lane's lock. mu_ guards the in-flight table, the sessions, the counters and the registry's
  // writer side; a lane's lock guards that lane's cache (held with mu_ everywhere but on the hit and host release).
  // The shared side of a lane lock is taken by io threads alone (reader slot = Session::io_index), never with mu_ or
  // the exclusive side held.
  std::mutex mu_;
  DaemonConfig cfg_;
  std::vector<Lane> lanes_;  // one per pool, in pool order (never resized after construction)
  struct alignas(64) HitCount {
    std::atomic<std::uint64_t> n{0};
  };
  std::size_t io_threads_;  // the lane locks' reader slots: io thread i reads through slot i
  std::vector<std::unique_ptr<LaneLock>> lane_locks_;  // by pool id, as lanes_
  std::unique_ptr<HitCount[]> lane_hits_;  // [io thread][lane]
  Registry registry_;  // get() lock-free; add() and find() under mu_
  std::unordered_map<std::uint64_t, InFlight> inflight_;
  std::unordered_map<ClientId, std::weak_ptr<Session>> sessions_;
  std::unordered_map<uid_t, std::uint32_t> sessions_per_uid_;  // admitted or not, until client_gone
  std::atomic<ClientId> next_client_{1};
  std::uint64_t decodes_ = 0, decode_ns_ = 0, prefetches_ = 0, prefetches_dropped_ = 0;  // under mu_
  // Acquires that waited for space, and their waits' total; by pool id, the acquires waiting now (wait_for_space).
  std::atomic<std::uint64_t> space_waits_{0}, space_wait_ns_{0};
  std::unique_ptr<std::atomic<std::uint32_t>[]> space_waiters_ =
      std::make_unique<std::atomic<std::uint32_t>[]>(shm::kMaxPools);
  DurationHistogram decode_hist_;  // under mu_, with decodes_
  std::atomic<bool> shutting_down_{false};  // set under mu_; read by hits without it
  std::atomic<bool> invariant_broken_{false};
  shm::StatusTable status_;  // early replies' decode status (device lanes; invalid when replies wait for the decode)
  std::function<void()> on_drained_;
  std::atomic<bool> fences_left_{false};
  // The shutdown log's figures; atomics: fenced releases hold only their lane's lock.
  std::atomic<std::uint64_t> fence_releases_{0}, fence_release_ns_{0};
  DecodeScheduler scheduler_;  // last: its workers stop (joined) before the members they use are destroyed; the
                               // lanes' device workers are joined in ~Service
};

void Session::fail(std::uint32_t request_id, shm::WireStatus status, const std::string& message) {
  spdlog::warn("client {}: {}; closing the session", id_, message);
  Service::send_error(*this, request_id, status, message);
  closing_ = true;
  if (!writing_) close_now();
}

void Session::end_after_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("client {}: session failed: {}", id_, ex.what());
  } catch (...) {
    spdlog::error("client {}: session failed", id_);
  }
  end();
}

void Session::end() {
  if (!gone_) svc_.client_gone(id_, peer_.uid);
  gone_ = true;
  closing_ = true;
  if (!writing_) close_now();
}

void Session::close_now() {
  if (!open_) return;
  open_ = false;
  boost::system::error_code ec;
  timer_.cancel();
  sock_.shutdown(Socket::shutdown_both, ec);
  sock_.close(ec);
}

void Session::do_write() {
  if (pending_.empty() && !fd_reply_.empty()) {
    writing_ = false;
    std::vector<std::uint8_t> msg = std::move(fd_reply_);
    std::vector<int> fds = std::move(fd_reply_fds_);
    fd_reply_.clear();
    fd_reply_fds_.clear();
    send_with_fds(std::move(msg), std::move(fds));
  }
  if (pending_.empty()) {
    writing_ = false;
    if (closing_) close_now();
    return;
  }
  writing_ = true;
  out_.swap(pending_);  // pending_ takes out_'s emptied buffer, capacity and all
  asio::async_write(sock_, asio::buffer(out_),
                    with_memory(write_memory_, [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      self->out_.clear();
                      if (ec) {
                        self->pending_.clear();
                        self->writing_ = false;
                        self->close_now();
                        return;
                      }
                      self->do_write();
                    }));
}

void Session::arm_timer(std::chrono::milliseconds after) {
  std::uint64_t gen = ++read_gen_;
  timer_.expires_after(after);
  std::weak_ptr<Session> weak = weak_from_this();
  timer_.async_wait([weak, gen](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->read_gen_ != gen || !self->open_) return;
    self->timed_out_ = true;
    boost::system::error_code ignored;
    self->sock_.cancel(ignored);
  });
}

void Session::handle_frame(const shm::FrameHeader& h, std::span<const std::uint8_t> payload) {
  using shm::MsgType;
  const std::uint32_t req = h.request_id;
  auto malformed = [&](const Error& e) { fail(req, shm::WireStatus::kBadMessage, e.message); };
  if (!hello_done_ && h.type != static_cast<std::uint16_t>(MsgType::kHello)) {
    fail(req, shm::WireStatus::kBadMessage, std::string("expected hello first, got ") + shm::msg_type_name(h.type));
    return;
  }
  switch (static_cast<MsgType>(h.type)) {
    case MsgType::kHello: {
      auto m = shm::decode_hello(payload);
      if (!m) return malformed(m.error());
      if (hello_done_) return fail(req, shm::WireStatus::kBadMessage, "hello sent twice");
      if (!refusal_.empty()) return fail(req, shm::WireStatus::kDenied, refusal_);
      hello_done_ = true;
      std::vector<std::uint8_t> out;
      shm::encode_hello_reply(req, svc_.hello_reply(domain_), &out);
      // The pool fds ride on the reply. Nothing else is queued before the hello reply, so a direct send keeps order.
      std::vector<int> fds = svc_.pool_fds(domain_);
      Status st = shm::send_with_fds(sock_.native_handle(), out, fds, read_timeout_ms_);
      if (!st) {
        spdlog::warn("client {}: hello reply: {}", id_, st.error().to_string());
        closing_ = true;
        close_now();
        return;
      }
      spdlog::debug("client {} ({}) connected", id_, describe(peer_));
      return;
    }
    case MsgType::kOpenModel: {
      auto m = shm::decode_open_model(payload);
      if (!m) return malformed(m.error());
      return svc_.on_open_model(*this, req, *m);
    }
    case MsgType::kAcquire: {
      if (Status st = shm::decode_acquire(payload, &acquire_); !st) return malformed(st.error());
      return svc_.on_acquire(*this, req, acquire_);
    }
    case MsgType::kPrefetch: {
      auto m = shm::decode_prefetch(payload);
      if (!m) return malformed(m.error());
      return svc_.on_prefetch(*this, req, *m);
    }
    case MsgType::kRelease: {
      auto m = shm::decode_release(payload);
      if (!m) return malformed(m.error());
      return svc_.on_release(*this, req, *m);
    }
    case MsgType::kStats: {
      if (Status st = shm::decode_empty(payload, "stats"); !st) return malformed(st.error());
      return svc_.on_stats(*this, req);
    }
    case MsgType::kModels: {
      if (Status st = shm::decode_empty(payload, "models"); !st) return malformed(st.error());
      return svc_.on_models(*this, req);
    }
    case MsgType::kOpenStored: {
      auto m = shm::decode_open_stored(payload);
      if (!m) return malformed(m.error());
      return svc_.on_open_stored(*this, req, *m);
    }
    case MsgType::kClose: {
      if (Status st = shm::decode_empty(payload, "close"); !st) return malformed(st.error());
      std::vector<std::uint8_t> out;
      shm::encode_empty(req, static_cast<MsgType>(static_cast<std::uint16_t>(MsgType::kClose) | shm::kReplyBit), &out);
      send(out);
      closing_ = true;
      if (!writing_) close_now();
      return;
    }
    default: fail(req, shm::WireStatus::kBadMessage, std::string("unknown message type ") + std::to_string(h.type));
  }
}

void Session::read_more() {
  std::size_t pos = 0;
  while (open() && have_ - pos >= shm::kHeaderSize) {
    auto h = shm::decode_header(std::span<const std::uint8_t>(buf_.data() + pos, have_ - pos));
    if (!h) {
      fail(0, h.error().code == ErrorCode::kUnsupported ? shm::WireStatus::kBadVersion : shm::WireStatus::kBadMessage,
           h.error().message);
      break;
    }
    if (have_ - pos - shm::kHeaderSize < h->payload_size) break;
    handle_frame(*h, std::span<const std::uint8_t>(buf_.data() + pos + shm::kHeaderSize, h->payload_size));
    pos += shm::kHeaderSize + h->payload_size;
  }
  if (!open()) return end();
  if (pos > 0) {
    std::memmove(buf_.data(), buf_.data() + pos, have_ - pos);
    have_ -= pos;
  }
  update_deadline(pos > 0);
  if (!open()) return end();
  sock_.async_read_some(asio::buffer(buf_.data() + have_, buf_.size() - have_),
                        with_memory(read_memory_, [self = shared_from_this()](boost::system::error_code ec,
                                                                              std::size_t n) {
                          self->guarded([&] { self->on_read(ec, n); });
                        }));
}

void Session::update_deadline(bool consumed) {
  const bool partial = have_ > 0 || !hello_done_;
  if (partial && (consumed || !partial_)) {
    // A message began with the bytes just read (or the session did): its whole deadline starts now.
    partial_ = true;
    idle_timed_ = false;
    message_deadline_ = Clock::now() + std::chrono::milliseconds(read_timeout_ms_);
    arm_timer(std::chrono::milliseconds(read_timeout_ms_));
  } else if (partial) {
    // More bytes of the same message: the deadline stays. A timer that fired while these bytes were on their way
    // found no read to cancel, so the deadline is checked here too.
    if (Clock::now() >= message_deadline_) {
      fail(0, shm::WireStatus::kBadMessage,
           have_ > 0 ? "timed out: " + std::to_string(have_) + " bytes of a message in " +
                           std::to_string(read_timeout_ms_) + " ms"
                     : "timed out waiting for hello");
    }
  } else if (consumed || partial_) {
    partial_ = false;
    if (idle_timeout_ms_ > 0) {
      idle_timed_ = true;
      arm_timer(std::chrono::milliseconds(idle_timeout_ms_));
    } else {
      ++read_gen_;  // disarms the message's timer
      timer_.cancel();
    }
  }
}

void Session::on_read(boost::system::error_code ec, std::size_t n) {
  if (!ec) timed_out_ = false;  // a timer that fired as these bytes arrived cancelled nothing: the deadline decides
  if (ec) {
    if (timed_out_ && idle_timed_) {
      spdlog::info("client {} ({}): no message for {} ms (idle_timeout_ms); closing the session", id_,
                   describe(peer_), idle_timeout_ms_);
    } else if (timed_out_) {
      fail(0, shm::WireStatus::kBadMessage,
           have_ > 0 ? "timed out: " + std::to_string(have_) + " bytes of a message in " +
                           std::to_string(read_timeout_ms_) + " ms"
                     : std::string("timed out waiting for hello"));
    } else if (have_ > 0 && ec == asio::error::eof) {
      fail(0, shm::WireStatus::kBadMessage,
           "truncated message: the stream ended after " + std::to_string(have_) + " bytes of it");
    }
    return end();
  }
  have_ += n;
  read_more();
}

Status listen_on(asio::local::stream_protocol::acceptor& acceptor, const DaemonConfig& cfg) {
  const std::string& path = cfg.socket_path;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return make_error(ErrorCode::kInvalidArgument, "socket path '" + path + "' is too long");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return make_error(ErrorCode::kInvalidArgument, path + ": exists and is not a socket");
    // A live daemon answers a connect; a stale socket file from a crash does not.
    asio::local::stream_protocol::socket probe(acceptor.get_executor());
    boost::system::error_code ec;
    probe.connect(asio::local::stream_protocol::endpoint(path), ec);
    if (!ec) return make_error(ErrorCode::kInvalidArgument, path + ": another epkd is listening there");
    ::unlink(path.c_str());
  }
  boost::system::error_code ec;
  acceptor.open(asio::local::stream_protocol(), ec);
  if (!ec) {
    // bind() creates the socket file with 0777 & ~umask. The umask during bind adds the complement of the configured
    // mode, so the file is born at most that wide (never wider, as a chmod after a plain bind would leave it for a
    // moment); the chmod after it only widens to exactly the configured mode bits the old umask had removed. The
    // umask is the process's: another thread creating a file meanwhile only gets a narrower mode.
    const mode_t old = ::umask(0777);  // reading the umask sets it: the strictest value meanwhile
    ::umask(old | static_cast<mode_t>(~cfg.socket_mode & 0777));
    acceptor.bind(asio::local::stream_protocol::endpoint(path), ec);
    ::umask(old);
  }
  if (!ec && ::chmod(path.c_str(), cfg.socket_mode & 0777) != 0) return make_errno_error(path + ": chmod", errno);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(ErrorCode::kIo, path + ": " + ec.message());
  return {};
}

// The trust domain of a peer: the first [[domain]] that lists it (1-based: lane domain ids), else the default (0).
std::uint32_t domain_of(const DaemonConfig& cfg, const PeerCredentials& peer) {
  for (std::size_t d = 0; d < cfg.domains.size(); ++d) {
    if (lists(cfg.domains[d].members, peer)) return static_cast<std::uint32_t>(d + 1);
  }
  return 0;
}

// Sessions are spread round-robin over the io contexts, one thread each: a session's handlers never run concurrently.
asio::awaitable<void> accept_loop(asio::local::stream_protocol::acceptor& acceptor, Service& svc,
                                  std::vector<std::unique_ptr<asio::io_context>>& contexts) {
  std::size_t next = 0;
  for (;;) {
    boost::system::error_code ec;
    const std::size_t index = next++ % contexts.size();
    asio::io_context& ctx = *contexts[index];
    Socket sock = co_await acceptor.async_accept(ctx, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      // Out of fds (EMFILE) and the like fail again at once: back off instead of spinning.
      spdlog::warn("accept: {}; retrying in 100 ms", ec.message());
      asio::steady_timer backoff(acceptor.get_executor(), std::chrono::milliseconds(100));
      co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    // The peer as the kernel saw it at connect(), never as the client describes itself.
    PeerCredentials peer;
    std::string refusal;
    std::uint32_t domain = 0;
    if (auto cred = peer_credentials(sock.native_handle())) {
      peer = std::move(*cred);
      refusal = svc.admit(peer);
      domain = domain_of(svc.config(), peer);
    } else {
      refusal = "access denied: the peer's credentials are unknown (" + cred.error().message + ")";
    }
    const ClientId id = svc.next_client_id();
    if (!refusal.empty()) spdlog::warn("client {} refused: {}", id, refusal);
    auto s = std::make_shared<Session>(std::move(sock), svc, id, index, svc.config().read_timeout_ms,
                                       svc.config().idle_timeout_ms, std::move(peer), domain, std::move(refusal));
    svc.add_session(s);
    Session::start(s);
  }
}

// An io thread's loop. spin_us == 0: io_context::run (block in epoll whenever there is nothing to do). Otherwise,
// after each handler, poll (non-blocking) for up to spin_us before blocking again: a request or completion that comes
// within the window is handled without a sleeping thread's wake-up. The window starts only after a handler ran, so an
// idle daemon blocks and costs nothing; a busy one keeps at most one core per io thread polling.
void run_io(asio::io_context& ctx, std::uint32_t spin_us) {
  if (spin_us == 0) {
    ctx.run();
    return;
  }
  const auto window = std::chrono::microseconds(spin_us);
  while (!ctx.stopped()) {
    if (ctx.run_one() == 0) break;  // blocks until a handler ran; 0: stopped or out of work
    auto last = Clock::now();
    while (!ctx.stopped()) {
      if (ctx.poll() > 0) {
        last = Clock::now();
      } else if (Clock::now() - last >= window) {
        break;
      }
    }
  }
}

}  // namespace

int run_daemon(const DaemonConfig& cfg) {
  // A model file truncated or unreadable under its map must fail that model's decodes, not kill epkd (SIGBUS).
  map_faults::install_map_fault_handler();
  // A second run in one process (tests run epkd in-process) reuses the logger: spdlog refuses a name twice.
  auto logger = spdlog::get("epkd");
  spdlog::set_default_logger(logger != nullptr ? logger : spdlog::stderr_color_mt("epkd"));
  if (auto lvl = spdlog::level::from_str(cfg.log_level); lvl != spdlog::level::off || cfg.log_level == "off") {
    spdlog::set_level(lvl);
  }
  // A device pool per usable CUDA device where --cpu is not given; otherwise (or none usable) exactly the host path.
  auto lanes = make_lanes(cfg);
  if (!lanes) {
    spdlog::critical("{}", lanes.error().to_string());
    return 1;
  }
  const std::uint32_t spin_us = spin_us_for(cfg.spin_us, std::thread::hardware_concurrency());
  // Half the cores, 1 to 16: with lane locks the hit path scales with io threads (16 clients on the 32-core H200
  // host: p50 14.5-15.3 us at 16 threads, 19.3 at 8, 34-37 at 4; on the 16-core host 8 threads beat 4 in every
  // measured setting, and 16 collapsed with 16 spinning clients). docs/NOTES.md, "rtt branch" and "latency branch".
  unsigned io_threads =
      cfg.io_threads != 0 ? cfg.io_threads : std::clamp(std::thread::hardware_concurrency() / 2, 1u, 16u);
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  for (unsigned i = 0; i < io_threads; ++i) contexts.push_back(std::make_unique<asio::io_context>(1));
  asio::io_context& io = *contexts[0];  // acceptor, signals, decode completions, and sessions too
  using Guard = asio::executor_work_guard<asio::io_context::executor_type>;
  std::vector<Guard> guards;  // the other contexts idle until shutdown
  for (unsigned i = 1; i < io_threads; ++i) guards.emplace_back(contexts[i]->get_executor());
  Service svc(io, cfg, std::move(*lanes), io_threads);
  std::size_t opened = svc.open_models(cfg);
  if (opened == 0 && (!cfg.models.empty() || !cfg.synthetic.empty())) {
    spdlog::critical("no model could be opened");
    return 1;
  }
  asio::local::stream_protocol::acceptor acceptor(io);
  auto activated = systemd_listen_fd();
  if (!activated) {
    spdlog::critical("{}", activated.error().to_string());
    return 1;
  }
  const bool socket_activated = activated->has_value();
  // systemd created the socket file and removes it (RemoveOnStop=); epkd only removes a socket it made itself.
  const std::string own_socket = socket_activated ? std::string() : cfg.socket_path;
  if (socket_activated) {
    boost::system::error_code ec;
    acceptor.assign(asio::local::stream_protocol(), (*activated)->get(), ec);
    if (ec) {
      spdlog::critical("socket activation: {}", ec.message());
      return 1;
    }
    (void)(*activated)->release();  // the acceptor owns it now
  } else if (cfg.socket_path.empty()) {
    spdlog::critical(
        "no socket: pass --socket or set 'socket' (LISTEN_FDS is set, but LISTEN_PID is not this process)");
    return 1;
  } else if (Status st = listen_on(acceptor, cfg); !st) {
    spdlog::critical("{}", st.error().to_string());
    return 1;
  }
  spdlog::info("listening on {} (budget {} MiB, {} models, {} io threads, spin {} us)",
               socket_activated ? "the socket systemd passed" : cfg.socket_path, cfg.budget_bytes >> 20,
               svc.model_count(), io_threads, spin_us);
  auto notify = [](const std::string& state) {
    if (auto r = sd_notify_send(state); !r) spdlog::warn("sd_notify: {}", r.error().to_string());
  };

  // systemd: STATUS= with the pools' occupancy every status_period, and WATCHDOG=1 with it when the unit has
  // WatchdogSec=. Sent from the main io context, the loop that accepts clients, handles signals and takes decode
  // completions: when it wedges the pings stop and systemd restarts epkd.
  std::string reload_note;  // why the last SIGHUP was refused, kept in STATUS= until a reload succeeds
  std::optional<std::chrono::microseconds> watchdog;
  if (auto w = watchdog_timeout(); !w) {
    spdlog::warn("watchdog off: {}", w.error().to_string());
  } else {
    watchdog = *w;
  }
  Periodic beat(io, status_period(watchdog), [&] {
    notify(std::string(watchdog ? "WATCHDOG=1\n" : "") + "STATUS=" + status_text(svc.stats()) + reload_note);
  });
  // Prometheus metrics (daemon/metrics.h): rendered here once a second, scrapes served from that copy.
  std::unique_ptr<MetricsServer> metrics;
  Periodic metrics_refresh(io, std::chrono::seconds(1), [&] {
    metrics->publish(metrics_text({svc.stats(), svc.models_info(), svc.decode_histogram(), EPK_VERSION}));
  });
  if (!cfg.metrics_listen.empty()) {
    auto m = start_metrics_server(cfg.metrics_listen);
    if (!m) {
      spdlog::critical("{}", m.error().to_string());
      return 1;
    }
    metrics = std::move(*m);
    metrics->publish(metrics_text({svc.stats(), svc.models_info(), svc.decode_histogram(), EPK_VERSION}));
    metrics_refresh.start();
    spdlog::info("metrics on http://{}/metrics", metrics->where());
  }

  asio::signal_set term(io, SIGTERM, SIGINT);
  asio::signal_set hup(io, SIGHUP);
  asio::steady_timer drain_deadline(io);
  auto stop_all = [&] {
    for (auto& c : contexts) c->stop();
  };
  term.async_wait([&](boost::system::error_code ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: draining", sig);
    boost::system::error_code ignored;
    notify("STOPPING=1");
    acceptor.close(ignored);
    if (!own_socket.empty()) ::unlink(own_socket.c_str());
    hup.cancel(ignored);
    // Sessions close once their replies are written; a client that never reads cannot hold the exit for long.
    drain_deadline.expires_after(std::chrono::seconds(2));
    drain_deadline.async_wait([&](boost::system::error_code e) {
      if (!e) stop_all();
    });
    svc.shutdown([&] {
      asio::post(io, [&] {
        drain_deadline.cancel();
        beat.stop();
        metrics_refresh.stop();
        guards.clear();
      });
    });
  });
  // Reloads run on a thread of their own, one at a time: opening a model reads and checksums files (and a path on a
  // slow or failing disk can take long), which must never stall the sessions of io thread 0.
  asio::thread_pool admin(1);
  std::function<void()> wait_hup = [&] {
    hup.async_wait([&](boost::system::error_code ec, int) {
      if (ec) return;
      if (cfg.config_file.empty()) {
        spdlog::info("SIGHUP: no config file to reload");
      } else {
        // Read and open on the reload thread; the outcome is published on the main context, which owns reload_note.
        asio::post(admin, [&] {
          notify("RELOADING=1");
          DaemonConfig fresh = cfg;
          fresh.models.clear();
          fresh.synthetic.clear();
          // A refused file changes nothing: the models and settings in force stay, and systemctl status says why.
          std::string note;
          if (Status st = load_config_file(cfg.config_file, &fresh); !st) {
            spdlog::error("SIGHUP: config refused, the previous one stays in force: {}", st.error().to_string());
            note = "; reload refused: " + st.error().message.substr(0, st.error().message.find('\n'));
          } else {
            std::size_t added = svc.open_models(fresh);
            spdlog::info("SIGHUP: {} model(s) added; models already open are kept as they are", added);
          }
          asio::post(io, [&, note] {
            reload_note = note;
            notify("READY=1\nSTATUS=serving " + std::to_string(svc.model_count()) + " model(s)" + reload_note);
          });
        });
      }
      wait_hup();
    });
  };
  wait_hup();
  // Ready: the socket listens, every configured model has been opened and validated (or refused and logged), and
  // SIGTERM is handled (a stop right after READY=1 still drains and exits 0).
  notify("READY=1\nSTATUS=serving " + std::to_string(svc.model_count()) + " model(s)\nMAINPID=" +
         std::to_string(::getpid()));
  if (notify_socket_set()) beat.start();
  asio::co_spawn(io, accept_loop(acceptor, svc, contexts), asio::detached);
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < io_threads; ++i) threads.emplace_back([&, i] { run_io(*contexts[i], spin_us); });
  run_io(io, spin_us);
  guards.clear();
  for (auto& t : threads) t.join();
  admin.join();  // a reload in progress finishes before the service goes
  const int rc = svc.invariant_broken() ? 3 : 0;
  if (rc != 0) {
    spdlog::critical("stopped; a cache invariant was broken");
  } else {
    spdlog::info("stopped");
  }
  if (svc.release_fences_left() || svc.release_fences_pending()) {
    // A client's kernels still hold release fences: tearing the device state down (cuMemFree and cuMemFreeHost
    // synchronise the device, and with it the side streams waiting on the clients' events) would wait for them, for
    // ever if a client hangs. End here: the kernel driver reclaims the device state as for a killed process.
    spdlog::warn("exiting without tearing down the device state (release fences still pending)");
    spdlog::shutdown();
    std::_Exit(rc);
  }
  return rc;
}

}  // namespace epk::daemon
