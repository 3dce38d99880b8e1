#include "daemon/net/systemd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>

namespace epk::daemon {
namespace {

constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START

std::optional<long> parse_long(const char* s) {
  if (s == nullptr) return std::nullopt;
  long v = 0;
  const char* end = s + std::strlen(s);
  auto [p, ec] = std::from_chars(s, end, v);
  if (ec != std::errc() || p != end || p == s) return std::nullopt;
  return v;
}

}  // namespace

Result<bool> sd_notify_send(std::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || env[0] == '\0') return false;
  std::string path = env;
  if (path[0] != '/' && path[0] != '@') {
    return make_error(ErrorCode::kInvalidArgument, "NOTIFY_SOCKET '" + path + "': neither a path nor '@abstract'");
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() > sizeof(addr.sun_path)) {
    return make_error(ErrorCode::kInvalidArgument, "NOTIFY_SOCKET '" + path + "': too long");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace: the length below delimits the name
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  shm::UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return make_errno_error("NOTIFY_SOCKET: socket", errno);
  ssize_t n;
  do {
    n = ::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr), len);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return make_errno_error("NOTIFY_SOCKET '" + path + "': sendto", errno);
  if (static_cast<std::size_t>(n) != state.size()) {
    return make_error(ErrorCode::kIo, "NOTIFY_SOCKET '" + path + "': short datagram");
  }
  return true;
}

bool notify_socket_set() {
  const char* env = std::getenv("NOTIFY_SOCKET");
  return env != nullptr && env[0] != '\0';
}

Result<std::optional<std::chrono::microseconds>> watchdog_timeout() {
  const char* usec_env = std::getenv("WATCHDOG_USEC");
  if (usec_env == nullptr) return std::optional<std::chrono::microseconds>();
  if (const char* pid_env = std::getenv("WATCHDOG_PID")) {
    auto pid = parse_long(pid_env);
    if (!pid || *pid <= 0) {
      return make_error(ErrorCode::kInvalidArgument, std::string("WATCHDOG_PID='") + pid_env + "' is not a pid");
    }
    if (*pid != static_cast<long>(::getpid())) return std::optional<std::chrono::microseconds>();
  }
  auto usec = parse_long(usec_env);
  if (!usec || *usec <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      std::string("WATCHDOG_USEC='") + usec_env + "' is not a positive number of microseconds");
  }
  return std::optional<std::chrono::microseconds>(std::chrono::microseconds(*usec));
}

std::chrono::microseconds status_period(std::optional<std::chrono::microseconds> watchdog) {
  std::chrono::microseconds p = kStatusPeriod;
  if (watchdog) p = std::min<std::chrono::microseconds>(p, *watchdog / 2);
  return std::max<std::chrono::microseconds>(p, std::chrono::milliseconds(1));
}

namespace {
std::string size_text(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}
}  // namespace

std::string status_text(const shm::StatsReply& s) {
  std::string t = "serving " + std::to_string(s.models) + " model(s), " + std::to_string(s.clients) + " client(s)";
  for (const shm::PoolStats& p : s.pools) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%",
                  p.budget_bytes != 0 ? 100.0 * static_cast<double>(p.used_bytes) / static_cast<double>(p.budget_bytes)
                                      : 0.0);
    t += "; pool " + std::to_string(p.pool_id) +
         (p.device >= 0 ? " device " + std::to_string(p.device) : std::string(" host")) + ": " +
         size_text(p.used_bytes) + " of " + size_text(p.budget_bytes) + " (" + pct + "), " +
         size_text(p.pinned_bytes) + " pinned, " + std::to_string(p.slots) + " slot(s), " + std::to_string(p.hits) +
         " hit(s), " + std::to_string(p.misses) + " miss(es)";
  }
  return t;
}

Result<std::optional<shm::UniqueFd>> systemd_listen_fd() {
  const char* pid_env = std::getenv("LISTEN_PID");
  const char* fds_env = std::getenv("LISTEN_FDS");
  if (pid_env == nullptr || fds_env == nullptr) return std::optional<shm::UniqueFd>();
  auto pid = parse_long(pid_env);
  auto fds = parse_long(fds_env);
  if (!pid || *pid != static_cast<long>(::getpid())) {
    // Meant for another process (a parent that did not clear them): not ours to use.
    return std::optional<shm::UniqueFd>();
  }
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (!fds || *fds != 1) {
    return make_error(ErrorCode::kInvalidArgument, std::string("socket activation: LISTEN_FDS='") + fds_env +
                                                       "', expected exactly 1 (one ListenStream= in epkd.socket)");
  }
  const int fd = kListenFdsStart;
  int type = 0, listening = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return make_errno_error("socket activation: fd 3 is not a socket", errno);
  }
  len = sizeof(listening);
  if (type != SOCK_STREAM || ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    return make_error(ErrorCode::kInvalidArgument, "socket activation: fd 3 is not a listening stream socket");
  }
  sockaddr_un addr{};
  len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sun_family != AF_UNIX) {
    return make_error(ErrorCode::kInvalidArgument, "socket activation: fd 3 is not an AF_UNIX socket");
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return std::optional<shm::UniqueFd>(shm::UniqueFd(fd));
}

}  // namespace epk::daemon
