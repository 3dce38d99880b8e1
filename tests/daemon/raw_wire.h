// Raw-socket helpers for tests that speak epkd's wire protocol by hand: malformed traffic, and clients that do what
// libepk never would with what epkd sends them. Header-only; every wait is bounded.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "shm/fd_passing.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk::test_harness {

inline int raw_connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline void raw_send(int fd, const std::vector<std::uint8_t>& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

struct RawReply {
  bool got = false;
  shm::FrameHeader header;
  std::vector<std::uint8_t> payload;
  bool eof_after = false;
};

// Reads one frame (the fds that came with it are kept in `kept` when given, else closed), then checks whether the
// daemon closed the stream after it.
inline RawReply raw_read_reply(int fd, int timeout_ms, bool expect_close, std::vector<shm::UniqueFd>* kept = nullptr) {
  RawReply r;
  std::vector<std::uint8_t> buf;
  std::vector<shm::UniqueFd> fds;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    std::uint8_t tmp[4096];
    auto n = shm::recv_with_fds(fd, tmp, &fds);
    if (!n || *n == 0) break;
    buf.insert(buf.end(), tmp, tmp + *n);
    if (buf.size() >= shm::kHeaderSize) {
      auto h = shm::decode_header(buf);
      if (h && buf.size() >= shm::kHeaderSize + h->payload_size) {
        r.got = true;
        r.header = *h;
        r.payload.assign(buf.begin() + shm::kHeaderSize, buf.begin() + shm::kHeaderSize + h->payload_size);
        break;
      }
    }
  }
  if (kept != nullptr) *kept = std::move(fds);
  if (expect_close) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      std::uint8_t tmp[256];
      if (::recv(fd, tmp, sizeof(tmp), 0) <= 0) {
        r.eof_after = true;
        break;
      }
    }
  }
  return r;
}

inline shm::WireStatus error_status(const RawReply& r) {
  EXPECT_EQ(r.header.type, static_cast<std::uint16_t>(shm::MsgType::kError));
  auto e = shm::decode_error(r.payload);
  EXPECT_TRUE(e);
  return e ? e->status : shm::WireStatus::kInternal;
}

inline void raw_hello(int fd) {
  std::vector<std::uint8_t> msg;
  shm::encode_hello(1, {static_cast<std::uint32_t>(::getpid()), 0}, &msg);
  raw_send(fd, msg);
  RawReply r = raw_read_reply(fd, 2000, false);
  ASSERT_TRUE(r.got);
  ASSERT_EQ(r.header.type, static_cast<std::uint16_t>(shm::MsgType::kHello) | shm::kReplyBit);
}

}  // namespace epk::test_harness
