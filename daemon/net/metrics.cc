#include "daemon/net/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <vector>
#include <string_view>

namespace epk::daemon {

void DurationHistogram::observe(std::uint64_t ns) {
  std::size_t i = 0;
  while (i < kBoundsNs.size() && ns > kBoundsNs[i]) ++i;  // le: a bucket holds values <= its bound
  ++counts[i];
  sum_ns += ns;
}

namespace {

// Label values: backslash, double quote and newline escaped (the text format's rules).
std::string escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// The shortest text that reads back as `v` ("1e-05", "0.00025", "1").
std::string number(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

class Writer {
 public:
  // # HELP and # TYPE once per family, then its samples.
  void family(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& labels, std::uint64_t v) {
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + std::to_string(v) + "\n";
  }
  void sample(const std::string& name, const std::string& labels, double v) {
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(v) + "\n";
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string pool_labels(const shm::PoolStats& p) {
  return "pool=\"" + std::to_string(p.pool_id) + "\",device=\"" +
         (p.device >= 0 ? std::to_string(p.device) : std::string("host")) + "\"";
}

}  // namespace

std::string metrics_text(const MetricsInput& in) {
  Writer w;
  const shm::StatsReply& s = in.stats;
  w.family("epkd_build_info", "gauge", "epkd's version, as a label; the value is always 1.");
  w.sample("epkd_build_info", "version=\"" + escape(in.version) + "\"", std::uint64_t{1});
  w.family("epkd_models", "gauge", "Models open.");
  w.sample("epkd_models", "", s.models);
  w.family("epkd_clients", "gauge", "Client sessions connected.");
  w.sample("epkd_clients", "", s.clients);
  struct PoolMetric {
    const char* name;
    const char* type;
    const char* help;
    std::uint64_t shm::PoolStats::*field;
  };
  static constexpr PoolMetric kPool[] = {
      {"epkd_pool_budget_bytes", "gauge", "Byte budget of the pool's cache.", &shm::PoolStats::budget_bytes},
      {"epkd_pool_used_bytes", "gauge", "Bytes of cached tensors in the pool.", &shm::PoolStats::used_bytes},
      {"epkd_pool_pinned_bytes", "gauge", "Bytes of cached tensors that clients hold pinned.",
       &shm::PoolStats::pinned_bytes},
      {"epkd_pool_resident_bytes", "gauge",
       "Bytes of compressed tensors kept on the pool's device (outside the budget).", &shm::PoolStats::resident_bytes},
      {"epkd_pool_fenced_bytes", "gauge",
       "Bytes of released tensors whose clients' release fences are still pending (not reusable yet).",
       &shm::PoolStats::fenced_bytes},
      {"epkd_pool_prefetched_bytes", "gauge", "Bytes of tensors a prefetch decoded that no client has acquired yet.",
       &shm::PoolStats::prefetched_bytes},
      {"epkd_pool_host_tier_bytes", "gauge",
       "Bytes of compressed tiers the pool's device decodes from host memory (tier_budget_mb): host tiers "
       "and intq forms.",
       &shm::PoolStats::host_tier_bytes},
      {"epkd_pool_staged_bytes_total", "counter",
       "Bytes the pool's decodes copied from host tiers to the device.", &shm::PoolStats::staged_bytes},
      {"epkd_pool_slots", "gauge", "Tensors cached in the pool.", &shm::PoolStats::slots},
      {"epkd_pool_pinned_slots", "gauge", "Cached tensors that clients hold pinned.", &shm::PoolStats::pinned_slots},
      {"epkd_pool_pins", "gauge", "Pins held by clients on the pool's tensors.", &shm::PoolStats::pins},
      {"epkd_cache_hits_total", "counter", "Acquires answered from the cache.", &shm::PoolStats::hits},
      {"epkd_cache_misses_total", "counter", "Acquires that needed a decode.", &shm::PoolStats::misses},
      {"epkd_cache_evictions_total", "counter", "Cached tensors evicted to make room.", &shm::PoolStats::evictions},
  };
  for (const PoolMetric& m : kPool) {
    w.family(m.name, m.type, m.help);
    for (const shm::PoolStats& p : s.pools) w.sample(m.name, pool_labels(p), p.*m.field);
  }
  w.family("epkd_prefetches_total", "counter", "Tensors named in prefetch requests.");
  w.sample("epkd_prefetches_total", "", s.prefetches);
  w.family("epkd_prefetches_dropped_total", "counter",
           "Prefetched tensors not decoded: no space, or an acquire was waiting for the space.");
  w.sample("epkd_prefetches_dropped_total", "", s.prefetches_dropped);
  w.family("epkd_space_waits_total", "counter",
           "Acquires that waited for fenced or decoding tensors to come free instead of failing.");
  w.sample("epkd_space_waits_total", "", s.space_waits);
  w.family("epkd_space_wait_seconds_total", "counter", "Time those acquires waited, in all.");
  w.sample("epkd_space_wait_seconds_total", "", static_cast<double>(s.space_wait_ns) / 1e9);
  w.family("epkd_decodes_total", "counter", "Decodes completed (successful or not).");
  w.sample("epkd_decodes_total", "", s.decodes);
  struct ModelMetric {
    const char* name;
    const char* help;
    std::uint64_t (*get)(const shm::ModelInfo&);
  };
  static constexpr ModelMetric kModel[] = {
      {"epkd_model_tensors", "Tensors in the model.", [](const shm::ModelInfo& m) -> std::uint64_t { return m.tensors; }},
      {"epkd_model_cached_bytes", "Bytes of the model's tensors cached, over every pool.",
       [](const shm::ModelInfo& m) { return m.cached_bytes; }},
      {"epkd_model_cached_slots", "The model's tensors cached, over every pool.",
       [](const shm::ModelInfo& m) { return m.cached_slots; }},
      {"epkd_model_pinned_slots", "The model's cached tensors that clients hold pinned.",
       [](const shm::ModelInfo& m) { return m.pinned_slots; }},
      {"epkd_model_tier_device_bytes", "The model's compressed tier kept on the devices, over every pool.",
       [](const shm::ModelInfo& m) { return m.tier_device_bytes; }},
      {"epkd_model_tier_host_bytes",
       "The model's compressed tier in host memory (its host tier and its intq forms there).",
       [](const shm::ModelInfo& m) { return m.tier_host_bytes; }},
  };
  for (const ModelMetric& m : kModel) {
    w.family(m.name, "gauge", m.help);
    for (const shm::ModelInfo& info : in.models.models) w.sample(m.name, "model=\"" + escape(info.name) + "\"", m.get(info));
  }
  const char* h = "epkd_decode_duration_seconds";
  w.family(h, "histogram", "Time from a decode's start on a worker to its end.");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < in.decode.counts.size(); ++i) {
    cumulative += in.decode.counts[i];
    const std::string le = i < DurationHistogram::kBoundsSeconds.size() ? number(DurationHistogram::kBoundsSeconds[i])
                                                                         : std::string("+Inf");
    w.sample(std::string(h) + "_bucket", "le=\"" + le + "\"", cumulative);
  }
  w.sample(std::string(h) + "_sum", "", static_cast<double>(in.decode.sum_ns) * 1e-9);
  w.sample(std::string(h) + "_count", "", cumulative);
  return w.take();
}

Result<MetricsAddress> parse_metrics_listen(const std::string& s) {
  MetricsAddress a;
  if (!s.empty() && s[0] == '/') {
    if (s.size() >= sizeof(sockaddr_un::sun_path)) {
      return make_error(ErrorCode::kInvalidArgument, "metrics_listen '" + s + "': path too long");
    }
    a.path = s;
    return a;
  }
  const std::string host = "127.0.0.1:";
  const std::string port = s.substr(std::min(s.size(), host.size()));
  if (s.compare(0, host.size(), host) != 0 || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535) {
    return make_error(ErrorCode::kInvalidArgument,
                      "metrics_listen '" + s + "': expected 127.0.0.1:PORT or an absolute Unix socket path");
  }
  a.tcp = true;
  a.port = static_cast<std::uint16_t>(std::stoul(port));
  return a;
}

namespace {

// Whether the socket file at `path` is stale (nobody accepts on it: connect() is refused), so that it may be unlinked.
// A connect that succeeds, or finds a full backlog (EAGAIN), meets a live listener: refused. The probe is non-blocking,
// so a listener that does not accept cannot stall epkd's start.
Status probe_stale_socket(const std::string& path) {
  shm::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe.valid()) return make_errno_error("metrics: socket", errno);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  int rc;
  do {
    rc = ::connect(probe.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  } while (rc != 0 && errno == EINTR);
  const int err = rc == 0 ? 0 : errno;
  if (err == ECONNREFUSED || err == ENOENT) return {};
  if (err == 0 || err == EAGAIN || err == EINPROGRESS) {
    return make_error(ErrorCode::kInvalidArgument,
                      "metrics: " + path + ": a live socket is listening there (epkd's own serving socket, or another "
                      "server's); not replacing it: choose another metrics_listen");
  }
  return make_errno_error("metrics: probing " + path, err);
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const MetricsAddress& addr) {
  shm::UniqueFd fd;
  std::string where, unlink_path;
  if (addr.tcp) {
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));  // run() accepts until EAGAIN
    if (!fd.valid()) return make_errno_error("metrics: socket", errno);
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(addr.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      return make_errno_error("metrics: bind 127.0.0.1:" + std::to_string(addr.port), errno);
    }
    socklen_t len = sizeof sa;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    where = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  } else {
    struct stat st {};
    if (::lstat(addr.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return make_error(ErrorCode::kInvalidArgument, "metrics: " + addr.path + " exists and is not a socket");
      }
      EPK_TRY(probe_stale_socket(addr.path));
      ::unlink(addr.path.c_str());
    }
    fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return make_errno_error("metrics: socket", errno);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, addr.path.data(), addr.path.size());
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      return make_errno_error("metrics: bind " + addr.path, errno);
    }
    where = unlink_path = addr.path;
  }
  if (::listen(fd.get(), static_cast<int>(kMaxConnections)) != 0) {
    return make_errno_error("metrics: listen " + where, errno);
  }
  shm::UniqueFd stop(::eventfd(0, EFD_CLOEXEC));
  if (!stop.valid()) return make_errno_error("metrics: eventfd", errno);
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(fd), std::move(stop), where, unlink_path));
}

Result<std::unique_ptr<MetricsServer>> start_metrics_server(const std::string& metrics_listen) {
  EPK_TRY_ASSIGN(MetricsAddress a, parse_metrics_listen(metrics_listen));
  return MetricsServer::start(a);
}

MetricsServer::MetricsServer(shm::UniqueFd listen, shm::UniqueFd stop, std::string where, std::string unlink_path)
    : listen_(std::move(listen)),
      stop_(std::move(stop)),
      where_(std::move(where)),
      unlink_path_(std::move(unlink_path)),
      text_(std::make_shared<const std::string>()) {
  thread_ = std::thread([this] { run(); });
}

MetricsServer::~MetricsServer() {
  const std::uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  thread_.join();
  if (!unlink_path_.empty()) ::unlink(unlink_path_.c_str());
}

void MetricsServer::publish(std::string text) {
  auto t = std::make_shared<const std::string>(std::move(text));
  std::lock_guard<std::mutex> lock(mu_);
  text_ = std::move(t);
}

// One accepted peer: its request as read so far, then its response as sent so far.
struct MetricsServer::Connection {
  shm::UniqueFd fd;
  std::chrono::steady_clock::time_point deadline;
  std::string request;
  std::string response;  // empty until the request is complete
  std::size_t sent = 0;
};

namespace {
constexpr std::size_t kMaxRequest = 8192;
constexpr std::size_t kAcceptsPerWake = 16;
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
}  // namespace

// A poll loop over the listening socket, the stop eventfd and every open connection (non-blocking): each connection
// advances when it is ready and is closed at its own deadline, so none waits for another.
void MetricsServer::run() {
  using Clock = std::chrono::steady_clock;
  std::deque<Connection> conns;  // in accept order: the front is the oldest
  Clock::time_point accept_paused_until{};
  std::vector<pollfd> p;
  for (;;) {
    const Clock::time_point now = Clock::now();
    const bool accepting = now >= accept_paused_until;
    p.assign({{stop_.get(), POLLIN, 0}, {accepting ? listen_.get() : -1, POLLIN, 0}});
    Clock::time_point wake = accepting ? Clock::time_point::max() : accept_paused_until;
    for (const Connection& c : conns) {
      p.push_back({c.fd.get(), static_cast<short>(c.response.empty() ? POLLIN : POLLOUT), 0});
      wake = std::min(wake, c.deadline);
    }
    int timeout = -1;
    if (wake != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
      timeout = static_cast<int>(std::clamp<std::int64_t>(left, 0, kConnectionDeadlineMs));
    }
    if (::poll(p.data(), p.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[0].revents != 0) return;
    const Clock::time_point after = Clock::now();
    std::size_t i = 2;
    for (auto it = conns.begin(); it != conns.end(); ++i) {
      const bool keep = after < it->deadline && (p[i].revents == 0 || step(*it));
      it = keep ? std::next(it) : conns.erase(it);  // erasing closes the fd
    }
    if ((p[1].revents & POLLIN) == 0) continue;
    for (std::size_t n = 0; n < kAcceptsPerWake; ++n) {
      shm::UniqueFd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c.valid()) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of fds or memory: the next accept would fail at once. Free the oldest connection's fd and wait a
          // little rather than spin on a listening socket that stays readable.
          if (!conns.empty()) conns.pop_front();
          accept_paused_until = Clock::now() + kAcceptBackoff;
        }
        break;  // EAGAIN: none left; ECONNABORTED and the like: that peer is gone
      }
      if (conns.size() >= kMaxConnections) conns.pop_front();
      conns.push_back({std::move(c), Clock::now() + std::chrono::milliseconds(kConnectionDeadlineMs), {}, {}, 0});
    }
  }
}

bool MetricsServer::step(Connection& c) {
  if (c.response.empty()) {
    char buf[2048];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
      if (n > 0) {
        c.request.append(buf, static_cast<std::size_t>(n));
        if (c.request.find("\r\n\r\n") != std::string::npos || c.request.size() >= kMaxRequest) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // the rest later
      if (n < 0) return false;
      break;  // end of stream: a client may half-close after its request
    }
    c.response = response(c.request);
  }
  while (c.sent < c.response.size()) {
    const ssize_t n = ::send(c.fd.get(), c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // wait for POLLOUT; any other error ends it
    }
  }
  return false;  // answered whole: closed
}

std::string MetricsServer::response(const std::string& req) {
  const std::string line = req.substr(0, req.find("\r\n"));
  const auto sp1 = line.find(' ');
  const auto sp2 = line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
  std::string status = "200 OK", body;
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    status = "400 Bad Request";
    body = "expected: GET /metrics HTTP/1.1\n";
  } else if (line.compare(0, sp1, "GET") != 0) {
    status = "405 Method Not Allowed";
    body = "only GET\n";
  } else {
    const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    if (target != "/metrics" && target.rfind("/metrics?", 0) != 0) {
      status = "404 Not Found";
      body = "epkd serves /metrics only\n";
    } else {
      std::shared_ptr<const std::string> t;
      {
        std::lock_guard<std::mutex> lock(mu_);
        t = text_;
      }
      body = *t;
    }
  }
  return "HTTP/1.1 " + status + "\r\nContent-Type: " +
         (status[0] == '2' ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8") +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace epk::daemon
