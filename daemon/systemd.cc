#include "daemon/systemd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
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
