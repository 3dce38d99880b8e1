#include "shm/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace epk::shm {
namespace {

Status wait_writable(int sock, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return make_error(ErrorCode::kIo, "send_with_fds: timed out waiting for the socket");
  pollfd p{sock, POLLOUT, 0};
  int r = ::poll(&p, 1, static_cast<int>(left.count()));
  if (r < 0 && errno != EINTR) return make_errno_error("send_with_fds: poll", errno);
  return {};
}

}  // namespace

Status send_with_fds(int sock, std::span<const std::uint8_t> bytes, std::span<const int> fds, int timeout_ms) {
  if (fds.size() > kMaxPassedFds) return make_error(ErrorCode::kInvalidArgument, "send_with_fds: too many fds");
  if (!fds.empty() && bytes.empty()) return make_error(ErrorCode::kInvalidArgument, "send_with_fds: fds need a byte");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::size_t sent = 0;
  bool fds_sent = fds.empty();
  while (sent < bytes.size()) {
    iovec iov{const_cast<std::uint8_t*>(bytes.data() + sent), bytes.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
    if (!fds_sent) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        EPK_TRY(wait_writable(sock, deadline));
        continue;
      }
      return make_errno_error("send_with_fds: sendmsg", errno);
    }
    fds_sent = true;
    sent += static_cast<std::size_t>(n);
  }
  return {};
}

Result<std::size_t> recv_with_fds(int sock, std::span<std::uint8_t> buf, std::vector<UniqueFd>* fds) {
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return make_errno_error("recv_with_fds: recvmsg", errno);
  std::vector<UniqueFd> got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      got.emplace_back(fd);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return make_error(ErrorCode::kBadInput, "recv_with_fds: control message truncated (more than " +
                                                std::to_string(kMaxPassedFds) + " fds sent)");
  }
  for (auto& f : got) fds->push_back(std::move(f));
  return static_cast<std::size_t>(n);
}

}  // namespace epk::shm
