// epkd's service: what every session shares. It joins the registry, the lanes (one pool, cache and lane lock each:
// daemon/lanes/device_lanes.h, daemon/cache/lane_lock.h) and the decode schedulers, and answers the sessions' requests on their
// own threads. Its member functions are written by responsibility:
//   service.cc      construction, sessions (admission, hello, a client's end), shutdown
//   acquire.cc      acquire, prefetch and release: the cache, pins, fences, waits for space, the acquire reply
//   decode_jobs.cc  uncached slots: produce() on the schedulers, early replies, completions
//   admin.cc        models (open at start and on SIGHUP, open_model, open_stored), stats, the models list
//
// Lock order: mu_, then a lane's lock; the shared side of a lane lock is taken by io threads alone (reader slot =
// Session::io_index) and never with mu_ or the exclusive side held. mu_ guards the in-flight table, the sessions,
// the counters marked "under mu_" and the registry's writer side. A lane's lock guards that lane's cache. Cache hits
// and releases take only their lane's lock (a hit or host-fence release its shared side when other pins keep the slot
// pinned); misses, prefetches, decodes done, a client's end and stats take mu_ and then the lane's lock. Acquire and
// release never wait for a decode: misses are queued to a scheduler, whose worker completes them and posts the
// replies to the sessions' threads.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/common/result.h"
#include "daemon/cache/cache.h"
#include "daemon/cache/lane_lock.h"
#include "daemon/config/config.h"
#include "daemon/lanes/decode_scheduler.h"
#include "daemon/lanes/device_lanes.h"
#include "daemon/net/metrics.h"
#include "daemon/net/refusal_log.h"
#include "daemon/net/request_handler.h"
#include "daemon/net/session.h"
#include "daemon/service/registry.h"
#include "daemon/sources/model_source.h"
#include "shm/decode_status.h"
#include "shm/protocol.h"

namespace epk::daemon::server {

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// An uncached acquire's way through epkd (steady_clock ns), logged at debug level once its reply is written: where
// the time between the request and the reply goes.
struct Timeline {
  std::int64_t read = 0;        // the acquire handled on its session's io thread (its bytes just read)
  std::int64_t submit = 0;      // the decode job queued
  std::int64_t worker = 0;      // a decode worker took it
  std::int64_t enqueued = 0;    // device path: the work issued to the stream, the wait for it begins
  std::int64_t done = 0;        // the decode finished (device: the stream synchronised, status read)
  std::int64_t completion = 0;  // the completion took the service lock and encoded the replies
};

// The wire status a client sees for an error of `code`.
shm::WireStatus wire_status_for(ErrorCode code);

class Service final : public RequestHandler {
 public:
  // `lanes`: one per pool, in pool order. `status`: the decode status table that device lanes' early replies name
  // (valid whenever a lane is on a device); host lanes decode before replying and need none.
  Service(boost::asio::io_context& io, const DaemonConfig& cfg, std::vector<Lane> lanes, std::size_t io_threads,
          shm::StatusTable status);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  const DaemonConfig& config() const { return cfg_; }

  // Sessions (service.cc). admit: whether `peer` may be served, checked at accept: why not (the accept loop writes it
  // as a kDenied error frame and closes the connection; no session is made) or empty. An admitted session counts
  // against its uid and against max_sessions until client_gone.
  std::string admit(const PeerCredentials& peer);
  // The most sessions served at once (0: no limit), the last kPrivilegedSessions of them only to root and epkd's uid.
  static constexpr std::uint32_t kPrivilegedSessions = 32;
  void set_session_limit(std::uint32_t max_sessions);
  ClientId next_client_id() { return next_client_.fetch_add(1); }
  void add_session(const std::shared_ptr<Session>& s);
  // A session ended: its pins go; its fences stay on their slots.
  void client_gone(ClientId id, uid_t uid) override;
  // The pools of `domain` only: a client never receives another domain's pool fds (docs/SECURITY.md).
  shm::HelloReply hello_reply(std::uint32_t domain) const override;
  // In pool order, as the hello reply lists them, then the status table's when there is one.
  std::vector<int> pool_fds(std::uint32_t domain) const override;

  // Requests (acquire.cc, admin.cc). Each runs on the calling session's thread and answers it, at once or (an
  // uncached acquire) from the decode worker. `waiting_since`: set when this is the retry of an acquire that waited
  // for space (wait_for_space), else epoch.
  void on_acquire(Session& s, std::uint32_t req, const shm::AcquireRequest& m) override {
    on_acquire(s, req, m, Clock::time_point{}, 0);
  }
  void on_acquire(Session& s, std::uint32_t req, const shm::AcquireRequest& m, Clock::time_point waiting_since,
                  unsigned attempt);
  void on_prefetch(Session& s, std::uint32_t req, const shm::PrefetchRequest& m) override;
  void on_release(Session& s, std::uint32_t req, const shm::ReleaseRequest& m) override;
  void on_open_model(Session& s, std::uint32_t req, const shm::OpenModelRequest& m) override;
  void on_open_stored(Session& s, std::uint32_t req, const shm::OpenStoredRequest& m) override;
  void on_stats(Session& s, std::uint32_t req) override;
  void on_models(Session& s, std::uint32_t req) override;
  void on_tensors(Session& s, std::uint32_t req, const shm::TensorsRequest& m) override;

  // Models and figures (admin.cc). apply_models: opens every configured model not yet served; with `reload`, also
  // re-opens as a new generation each served model whose file (its path, or the file behind it: device, inode, size,
  // mtime), synthetic spec or uids/gids changed, and retires each served model the config no longer lists. A retired
  // model (removed, or the old generation of a replaced one) is no longer found by name, and requests naming its id
  // are refused (kModelGone, naming it), but the slots clients hold pinned keep serving their bytes; its source (file
  // mapping), its remaining slots and its device tiers go at the first sweep_retired() after its last lease has gone.
  // A model that fails to open is logged and skipped (a replacement that fails leaves the generation in force
  // serving). Runs at start (before serving) and on the reload thread, one call at a time, never on an io thread (a
  // slow open must not stall sessions).
  struct ModelChanges {
    std::size_t added = 0, replaced = 0, removed = 0, failed = 0;
  };
  ModelChanges apply_models(const DaemonConfig& cfg, bool reload);
  // Frees what retired models hold once nothing of theirs is pinned, decoding or behind a pending release fence;
  // answers how many are still retiring. On the reload thread (as apply_models, which runs one first).
  std::size_t sweep_retired();
  // Whether any model is retiring (lock-free: the periodic sweep's test).
  bool retiring() const { return retiring_count_.load(std::memory_order_relaxed) != 0; }
  // Models served or retiring.
  std::size_t model_count();
  // The pools' cache counters and the service's, as the stats message carries them. `peer` null: every pool,
  // model and session (metrics, systemd's STATUS=). Else what that peer may see (root and epkd's uid: everything):
  // the pools of `domain`, the models it may use and its own uid's sessions (docs/SECURITY.md, "What a uid can
  // learn").
  shm::StatsReply stats(const PeerCredentials* peer = nullptr, std::uint32_t domain = 0);
  // Every model with its cached slots and bytes over the pools. `peer`: only the models it may use; null: every
  // model (metrics). `restricted` false: none that has uids/gids (the metrics, unless metrics_restricted_models).
  shm::ModelsReply models_info(const PeerCredentials* peer = nullptr, bool restricted = true);
  DurationHistogram decode_histogram();

  // SIGTERM (service.cc): finish decodes in flight (their waiters get answers), then stop every session.
  // `on_drained` runs once the last session has ended (at once if there is none), on some session's thread or the
  // main one.
  void shutdown(std::function<void()> on_drained);
  // Whether shutdown gave up waiting for release fences (run_daemon then skips the device teardown).
  bool release_fences_left() const { return fences_left_; }
  // Whether any device still has release fences or side-stream waits pending now (after the io threads stopped: a
  // release read after shutdown's wait may have queued one).
  bool release_fences_pending();
  bool invariant_broken() const { return invariant_broken_.load(); }

 private:
  struct Waiter {
    std::weak_ptr<Session> session;
    std::uint32_t request_id;
  };
  // An uncached slot's decode and the acquires waiting for it. Lives in inflight_ (under mu_) from start_decode until
  // its completion.
  struct InFlight {
    DecodeScheduler::JobPtr job;
    ServedTensor desc;
    std::vector<Waiter> waiters;
    std::int64_t read_ns = 0, submit_ns = 0;  // the first acquire's Timeline (0 for a prefetch)
  };
  struct alignas(64) HitCount {
    std::atomic<std::uint64_t> n{0};
  };

  // acquire.cc
  void wait_for_space(Session& s, std::uint32_t req, const shm::AcquireRequest& m, const Lane& lane,
                      Clock::time_point since, unsigned attempt);
  void end_space_wait(Clock::time_point since);
  void reply_hit(Session& s, std::uint32_t req, const Lane& lane, const Slot& slot, const ServedTensor& served);
  static void reply_release(Session& s, std::uint32_t req, const shm::ReleaseRequest& m);
  void count_hit(std::size_t io_index, const Lane& l);
  std::uint64_t lane_hits(const Lane& l) const;
  // The acquire reply for `slot`, from every path that answers one (hits, early replies, completions). `*r` is reset
  // to carry no status ticket afterwards (the session's reused reply: a ticket belongs to one early answer).
  void encode_acquire_reply(std::uint32_t req, const Lane& lane, const Slot& slot, const ServedTensor& desc,
                            shm::AcquireReply* r, std::vector<std::uint8_t>* out) const;

  // decode_jobs.cc
  InFlight& start_decode(Lane& lane, const Slot& slot, std::shared_ptr<const ModelSource> src, std::size_t tensor,
                         shm::Layout layout, const shm::ShardRange& shard, ServedTensor desc, Priority prio);
  void reply_early(std::uint64_t slot_id, const Timeline& worker_tl, std::uint64_t* ticket_out);
  void on_decoded(std::uint64_t slot_id, Status st, std::uint64_t ns, Timeline tl);
  void log_decode(const Lane& lane, std::uint64_t slot_id, const Slot* slot, const InFlight& f, const Status& st,
                  std::uint64_t ns);
  DecodeScheduler& decode_scheduler(Lane& lane) { return lane.gpu_scheduler ? *lane.gpu_scheduler : scheduler_; }

  // admin.cc
  // A served model by name, or nullopt.
  std::optional<std::uint32_t> served_id(const std::string& name);
  // Publishes `src` as `name`, retiring `replaces` (a served id, or nullopt) in the same lock hold, then uploads its
  // device tiers. Whether it was added.
  bool add_model(const ModelSpec& spec, std::shared_ptr<const ModelSource> src, FileIdentity file,
                 std::optional<std::uint32_t> replaces);
  // The refusal of a request naming a retired model's id.
  static void model_gone(Session& s, std::uint32_t req, const ModelEntry& model);
  static bool may_use(const PeerCredentials& peer, const ModelEntry& model) {
    return model.access.open() || allows(model.access, peer);
  }
  static bool may_use(const Session& s, const ModelEntry& model) { return may_use(s.peer(), model); }
  // The answer to a request naming, by id, a model the peer may not use: `request`'s answer for an unknown id
  // (kNotFound, "REQUEST: unknown model id"), so that counting up ids reveals no name; epkd's log names the model
  // (at most once per interval per uid: log_hidden).
  void hide_model(Session& s, std::uint32_t req, const char* request, const ModelEntry& model);
  void log_hidden(const Session& s, const std::string& model, const char* request);
  // An acquire refused for space: the log line names the uids holding the pool's pins (never the client's answer).
  // The caller holds the lane's lock.
  void log_blocked(const Session& s, const Lane& lane, const SpaceReport& space);
  // Whether `log` lets a line for `uid` through now (under log_limit_mu_); *suppressed: the lines it held back.
  bool log_allowed(RefusalLog& log, uid_t uid, std::uint64_t* suppressed);
  static std::string device_not_served(std::uint32_t device);

  // service.cc
  // The caller holds `l`'s lane lock (exclusive side); each operation changes one lane's cache, and checks that one.
  void check(const Lane& l);
  void wait_for_release_fences();
  LaneLock& lane_mu(const Lane& l) const { return *lane_locks_[l.pool_id]; }

  boost::asio::io_context& io_;  // the main context: shutdown steps run there
  std::mutex mu_;
  DaemonConfig cfg_;
  std::vector<Lane> lanes_;  // one per pool, in pool order (never resized after construction)
  std::size_t io_threads_;   // the lane locks' reader slots: io thread i reads through slot i
  std::vector<std::unique_ptr<LaneLock>> lane_locks_;  // by pool id, as lanes_
  // Hits taken without mu_, counted per io thread and lane ([io thread][lane]): each counter has one writer (the
  // thread that runs that context's sessions), so a hit writes no line that other threads' hits write. Summed for
  // stats.
  std::unique_ptr<HitCount[]> lane_hits_;
  Registry registry_;  // get() lock-free; add() and find() under mu_
  std::unordered_map<std::uint64_t, InFlight> inflight_;  // by slot id, under mu_
  std::unordered_map<ClientId, std::weak_ptr<Session>> sessions_;
  std::unordered_map<uid_t, std::uint32_t> sessions_per_uid_;  // admitted sessions, until client_gone
  std::uint32_t open_sessions_ = 0;                            // admitted sessions of every uid
  std::uint32_t max_sessions_ = 0;                             // set_session_limit
  std::atomic<ClientId> next_client_{1};
  // io threads log hidden-model requests and acquires refused for space each through a rate limit per uid.
  std::mutex log_limit_mu_;
  RefusalLog hidden_log_, blocked_log_;
  std::vector<std::uint32_t> retiring_;  // model ids retired whose source is still held, under mu_
  std::atomic<std::size_t> retiring_count_{0};  // retiring_.size()
  std::uint64_t decodes_ = 0, decode_ns_ = 0, prefetches_ = 0, prefetches_dropped_ = 0;  // under mu_
  // Acquires that waited for space, and their waits' total; by pool id, the acquires waiting now (wait_for_space).
  std::atomic<std::uint64_t> space_waits_{0}, space_wait_ns_{0};
  std::unique_ptr<std::atomic<std::uint32_t>[]> space_waiters_ =
      std::make_unique<std::atomic<std::uint32_t>[]>(shm::kMaxPools);
  DurationHistogram decode_hist_;  // under mu_, with decodes_
  std::atomic<bool> shutting_down_{false};  // set under mu_; read by hits without it
  std::atomic<bool> invariant_broken_{false};
  shm::StatusTable status_;  // early replies' decode status (valid when a lane is on a device)
  std::function<void()> on_drained_;
  std::atomic<bool> fences_left_{false};
  // The shutdown log's figures; atomics: fenced releases hold only their lane's lock.
  std::atomic<std::uint64_t> fence_releases_{0}, fence_release_ns_{0};
  DecodeScheduler scheduler_;  // last: its workers stop (joined) before the members they use are destroyed; the
                               // lanes' device workers are joined in ~Service
};

}  // namespace epk::daemon::server
