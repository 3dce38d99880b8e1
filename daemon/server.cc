// epkd's process (daemon/server.h): logging, the lanes, the listening socket (systemd's or its own), the io threads
// and their accept loop, signals (SIGTERM drains, SIGHUP reloads the models), systemd's notifications and watchdog,
// and the metrics endpoint. What a connection does is daemon/net/session.h's; what the requests do, daemon/service/service.h's.
#include "daemon/log_format.h"
#include "daemon/server.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "codec/common/map_faults.h"
#include "daemon/lanes/device_lanes.h"
#include "daemon/net/metrics.h"
#include "daemon/net/refusal_log.h"
#include "daemon/net/session.h"
#include "daemon/net/systemd.h"
#include "daemon/periodic.h"
#include "daemon/service/service.h"
#include "shm/decode_status.h"

namespace epk::daemon {
namespace {

namespace asio = boost::asio;
using server::Clock;
using server::Service;
using server::Session;
using server::Socket;

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

// A connection refused at accept: why, as a kDenied error frame (request id 0, which the client takes as the answer to
// its hello), written without blocking into the socket's empty send buffer, then closed at once. No session is made,
// so a refused peer holds no fd and no buffer past this call, however often it reconnects; its log lines are rate
// limited per uid (RefusalLog).
void refuse(Socket& sock, const PeerCredentials& peer, const std::string& why, RefusalLog& log) {
  std::vector<std::uint8_t> frame;
  shm::encode_error(0, {shm::WireStatus::kDenied, why}, &frame);
  (void)!::send(sock.native_handle(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  boost::system::error_code ignored;
  sock.close(ignored);
  std::uint64_t suppressed = 0;
  if (log.should_log(peer.uid, RefusalLog::Clock::now(), &suppressed)) {
    spdlog::warn("access_denied {} at=connect reason={} unlogged_since_last={}", peer_kv(peer), kv(why), suppressed);
  }
}

// Sessions are spread round-robin over the io contexts, one thread each: a session's handlers never run concurrently.
asio::awaitable<void> accept_loop(asio::local::stream_protocol::acceptor& acceptor, Service& svc,
                                  std::vector<std::unique_ptr<asio::io_context>>& contexts) {
  std::size_t next = 0;
  RefusalLog refusals;
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
    if (!refusal.empty()) {
      refuse(sock, peer, refusal, refusals);
      continue;
    }
    const ClientId id = svc.next_client_id();
    auto s = std::make_shared<Session>(std::move(sock), svc, id, index, svc.config().read_timeout_ms,
                                       svc.config().idle_timeout_ms, std::move(peer), domain);
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

// The fd limit raised to its hard limit (sessions are fds), and the sessions served at once: `configured`, or 0 for
// the fd limit less kReservedFds (model files, pool and status fds, fds in flight to clients, the metrics endpoint).
std::uint32_t session_limit(std::uint32_t configured) {
  constexpr rlim_t kReservedFds = 512;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (configured != 0) return configured;
  const rlim_t fds = lim.rlim_cur == RLIM_INFINITY ? rlim_t{1} << 20 : lim.rlim_cur;
  return fds > kReservedFds + 2 * Service::kPrivilegedSessions
             ? static_cast<std::uint32_t>(std::min<rlim_t>(fds - kReservedFds, rlim_t{1} << 24))
             : 2 * Service::kPrivilegedSessions;
}

}  // namespace

int run_daemon(const DaemonConfig& cfg) {
  // A model file truncated or unreadable under its map must fail that model's decodes, not kill epkd (SIGBUS).
  map_faults::install_map_fault_handler();
  // A second run in one process (tests run epkd in-process) reuses the logger: spdlog refuses a name twice.
  auto logger = spdlog::get("epkd");
  spdlog::set_default_logger(logger != nullptr ? logger : spdlog::stderr_color_mt("epkd"));
  configure_log_pattern(*spdlog::default_logger(), stderr_is_journal());
  if (auto lvl = spdlog::level::from_str(cfg.log_level); lvl != spdlog::level::off || cfg.log_level == "off") {
    spdlog::set_level(lvl);
  }
  // A device pool per usable CUDA device where --cpu is not given; otherwise (or none usable) exactly the host path.
  auto lanes = make_lanes(cfg);
  if (!lanes) {
    spdlog::critical("{}", lanes.error().to_string());
    return 1;
  }
  // Device lanes answer an uncached acquire as soon as its decode is on the stream, with a ticket in this table that
  // the client waits for (docs/PROTOCOL.md acquire, shm/decode_status.h); host lanes decode before they reply.
  shm::StatusTable status;
  if (std::any_of(lanes->begin(), lanes->end(), [](const Lane& l) { return l.on_device(); })) {
    auto t = shm::StatusTable::create();
    if (!t) {
      spdlog::critical("decode status table: {}", t.error().to_string());
      return 1;
    }
    status = std::move(*t);
  }
  const std::uint32_t spin_us = spin_us_for(cfg.spin_us, std::thread::hardware_concurrency());
  // Half the cores, 1 to 16: the hit path scales with io threads (16 clients on the 32-core H200 host); on the
  // 16-core host 8 threads beat 4 in every measured setting, and 16 collapsed with 16 spinning clients
  // (docs/measurements/cache-hit-round-trips.md).
  unsigned io_threads =
      cfg.io_threads != 0 ? cfg.io_threads : std::clamp(std::thread::hardware_concurrency() / 2, 1u, 16u);
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  for (unsigned i = 0; i < io_threads; ++i) contexts.push_back(std::make_unique<asio::io_context>(1));
  asio::io_context& io = *contexts[0];  // acceptor, signals, decode completions, and sessions too
  using Guard = asio::executor_work_guard<asio::io_context::executor_type>;
  std::vector<Guard> guards;  // the other contexts idle until shutdown
  for (unsigned i = 1; i < io_threads; ++i) guards.emplace_back(contexts[i]->get_executor());
  Service svc(io, cfg, std::move(*lanes), io_threads, std::move(status));
  const std::uint32_t max_sessions = session_limit(cfg.max_sessions);
  svc.set_session_limit(max_sessions);
  const std::size_t opened = svc.apply_models(cfg, false).added;
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
  spdlog::info("listening on {} (budget {} MiB, {} models, {} io threads, spin {} us, at most {} sessions)",
               socket_activated ? "the socket systemd passed" : cfg.socket_path, cfg.budget_bytes >> 20,
               svc.model_count(), io_threads, spin_us, max_sessions);
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
  // Prometheus metrics (daemon/net/metrics.h): rendered here once a second, scrapes served from that copy.
  // Any local user may scrape the endpoint: models with uids/gids stay out of it (their names, their occupancy, and
  // epkd_models' count) unless metrics_restricted_models opts in (docs/SECURITY.md, "The metrics endpoint").
  std::unique_ptr<MetricsServer> metrics;
  auto metrics_now = [&] {
    MetricsInput in{svc.stats(), svc.models_info(nullptr, cfg.metrics_restricted_models), svc.decode_histogram(),
                    EPK_VERSION};
    in.stats.models = in.models.models.size();  // the models listed: served and retiring, as stats counts them
    return metrics_text(in);
  };
  Periodic metrics_refresh(io, std::chrono::seconds(1), [&] { metrics->publish(metrics_now()); });
  if (!cfg.metrics_listen.empty()) {
    auto m = start_metrics_server(cfg.metrics_listen);
    if (!m) {
      spdlog::critical("{}", m.error().to_string());
      return 1;
    }
    metrics = std::move(*m);
    metrics->publish(metrics_now());
    metrics_refresh.start();
    spdlog::info("metrics on http://{}/metrics", metrics->where());
  }

  // Reloads run on a thread of their own, one at a time: opening a model reads and checksums files (and a path on a
  // slow or failing disk can take long), which must never stall the sessions of io thread 0.
  asio::thread_pool admin(1);
  // Retired models (daemon/service/service.h) are freed on the reload thread once their last lease has gone: checked ten times
  // a second while any is retiring (a release fence completing has no event to wake it).
  Periodic retired_sweep(io, std::chrono::milliseconds(100), [&] {
    if (svc.retiring()) asio::post(admin, [&] { svc.sweep_retired(); });
  });
  retired_sweep.start();
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
        retired_sweep.stop();
        guards.clear();
      });
    });
  });
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
            const Service::ModelChanges c = svc.apply_models(fresh, true);
            spdlog::info("reloaded added={} replaced={} removed={} failed={} note=\"leases on removed or replaced "
                         "models stay valid until released\"",
                         c.added, c.replaced, c.removed, c.failed);
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
