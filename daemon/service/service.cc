// The service's construction, its sessions and its shutdown (daemon/service/service.h).
#include "daemon/service/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <thread>

#include "shm/error_table.h"

namespace epk::daemon::server {

namespace asio = boost::asio;

shm::WireStatus wire_status_for(ErrorCode code) { return shm::error_row(code).wire; }

// Evicted ranges keep their pages: the next slot there rewrites them, and faulting them in again would cost more than
// the memory (the budget is the pool's size either way).
Service::Service(asio::io_context& io, const DaemonConfig& cfg, std::vector<Lane> lanes, std::size_t io_threads,
                 shm::StatusTable status)
    : io_(io),
      cfg_(cfg),
      lanes_(std::move(lanes)),
      io_threads_(io_threads),
      lane_hits_(std::make_unique<HitCount[]>(io_threads * lanes_.size())),
      status_(std::move(status)),
      scheduler_(cfg.threads != 0 ? cfg.threads : std::max(1u, std::thread::hardware_concurrency())) {
  for (std::size_t i = 0; i < lanes_.size(); ++i) lane_locks_.push_back(std::make_unique<LaneLock>(io_threads));
}

Service::~Service() {
  // The device workers use their lane's backend and this service: joined before anything goes.
  for (Lane& l : lanes_) {
    if (l.gpu_scheduler) l.gpu_scheduler->stop();
  }
}

void Service::set_session_limit(std::uint32_t max_sessions) {
  std::lock_guard<std::mutex> lock(mu_);
  max_sessions_ = max_sessions;
}

std::string Service::admit(const PeerCredentials& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!allows(cfg_.access, peer)) {
    return "access denied: " + describe(peer) + " is not allowed to connect (allowed_uids / allowed_gids)";
  }
  auto u = sessions_per_uid_.find(peer.uid);
  const std::uint32_t open = u == sessions_per_uid_.end() ? 0 : u->second;
  if (open >= cfg_.max_sessions_per_uid) {
    return "uid " + std::to_string(peer.uid) + " already has " + std::to_string(open) +
           " sessions open (max_sessions_per_uid = " + std::to_string(cfg_.max_sessions_per_uid) + ")";
  }
  // The last kPrivilegedSessions sessions are kept for root and epkd's own uid (an operator's epk top still connects
  // while other uids hold every other one).
  const bool privileged = epk::daemon::privileged(peer);
  const std::uint32_t cap =
      privileged || max_sessions_ <= kPrivilegedSessions ? max_sessions_ : max_sessions_ - kPrivilegedSessions;
  if (max_sessions_ != 0 && open_sessions_ >= cap) {
    return "epkd serves " + std::to_string(open_sessions_) + " sessions, the most it takes" +
           (privileged ? "" : " from uids other than root and its own") + " (max_sessions = " +
           std::to_string(max_sessions_) + ")";
  }
  ++sessions_per_uid_[peer.uid];
  ++open_sessions_;
  return {};
}

void Service::add_session(const std::shared_ptr<Session>& s) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[s->id()] = s;
}

void Service::client_gone(ClientId id, uid_t uid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto u = sessions_per_uid_.find(uid); u != sessions_per_uid_.end()) {
      --open_sessions_;
      if (--u->second == 0) sessions_per_uid_.erase(u);
    }
    for (Lane& l : lanes_) {
      std::lock_guard<LaneLock> ll(lane_mu(l));
      l.cache->drop_client(id);
      check(l);
    }
    sessions_.erase(id);
    spdlog::debug("client_gone client={} pins=dropped", id);
    if (shutting_down_ && sessions_.empty() && on_drained_) on_drained_();
  }
  // Its opened events and side streams (GpuBackend guards its own maps): destroying them must not stall the hits of
  // other clients on the lane locks. Its fences stay on their slots.
  for (Lane& l : lanes_) {
    if (l.gpu) l.gpu->drop_client(id);
  }
}

shm::HelloReply Service::hello_reply(std::uint32_t domain) const {
  shm::HelloReply r;
  for (const Lane& l : lanes_) {
    if (l.domain != domain) continue;
    r.pools.push_back({l.pool_id, l.pool->kind(), l.pool->device(), l.pool->size()});
    if (l.gpu) r.events.insert(r.events.end(), l.gpu->event_handles().begin(), l.gpu->event_handles().end());
  }
  r.status_entries = status_.valid() ? status_.entries() : 0;
  return r;
}

std::vector<int> Service::pool_fds(std::uint32_t domain) const {
  std::vector<int> fds;
  for (const Lane& l : lanes_) {
    if (l.domain == domain) fds.push_back(l.pool->export_fd());
  }
  if (status_.valid()) fds.push_back(status_.fd());
  return fds;
}

void Service::check(const Lane& l) {
  if (!cfg_.check_invariants || invariant_broken_) return;
  if (Status v = l.cache->verify(); !v) {
    spdlog::critical("pool {}: {}", l.pool_id, v.error().to_string());
    invariant_broken_ = true;
  }
}

void Service::shutdown(std::function<void()> on_drained) {
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

// At shutdown: release fences not yet complete mean a client's kernels may still read their slots. Nothing in epkd
// waits on them (the decode streams never do, and the side streams and markers are destroyed without waiting), so a
// client that hangs cannot hold the exit: wait a little for the common case, then log what is left and go on.
void Service::wait_for_release_fences() {
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

bool Service::release_fences_pending() {
  for (Lane& l : lanes_) {
    if (l.gpu && l.gpu->pending_fences() != 0) return true;
  }
  return false;
}

}  // namespace epk::daemon::server
