// Client::Impl's socket I/O and framing (client_impl.h): sending a request, receiving whole reply frames into the
// receive buffer, and matching a reply (or an error reply) to its request.
#include "client/client_impl.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "shm/error_table.h"
#include "shm/fd_passing.h"

namespace epk::client {

namespace {

// An error reply's wire status as libepk's error code (the error table's inverse).
ErrorCode code_for(shm::WireStatus s) { return shm::error_code_for(s); }

}  // namespace

ssize_t Client::Impl::recv_spinning(std::uint8_t* dst, std::size_t room) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    ssize_t r = ::recv(sock.get(), dst, room, MSG_DONTWAIT);
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return r;
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  ssize_t r;
  do {
    r = ::recv(sock.get(), dst, room, 0);
  } while (r < 0 && errno == EINTR);
  return r;
}

Status Client::Impl::send_all(const std::vector<std::uint8_t>& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(sock.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      // A peer that closed may have written why first (epkd refuses a connection at accept that way): the socket
      // stays open for call() to read it.
      if (e != EPIPE && e != ECONNRESET) sock.reset();
      return make_errno_error("epk client: send", e);
    }
    sent += static_cast<std::size_t>(n);
  }
  return {};
}

Result<Frame> Client::Impl::next_frame(std::vector<shm::UniqueFd>* fds) {
  if (rx_drop > 0) {
    std::memmove(rx.data(), rx.data() + rx_drop, rx_have - rx_drop);  // usually 0 bytes: one reply per recv
    rx_have -= rx_drop;
    rx_drop = 0;
  }
  for (;;) {
    if (rx_have >= shm::kHeaderSize) {
      auto h = shm::decode_header(std::span<const std::uint8_t>(rx.data(), rx_have));
      if (!h) {
        sock.reset();
        return make_error(ErrorCode::kBadInput, "epk client: reply from epkd: " + h.error().message);
      }
      std::size_t total = shm::kHeaderSize + h->payload_size;
      if (rx_have >= total) {
        rx_drop = total;
        return Frame{*h, std::span<const std::uint8_t>(rx.data() + shm::kHeaderSize, h->payload_size)};
      }
    }
    Result<std::size_t> n = std::size_t{0};
    if (fds != nullptr) {
      n = shm::recv_with_fds(sock.get(), std::span<std::uint8_t>(rx.data() + rx_have, rx.size() - rx_have), fds);
    } else {
      ssize_t r;
      if (spin_us > 0) {
        r = recv_spinning(rx.data() + rx_have, rx.size() - rx_have);
      } else {
        do {
          r = ::recv(sock.get(), rx.data() + rx_have, rx.size() - rx_have, 0);
        } while (r < 0 && errno == EINTR);
      }
      if (r < 0) {
        n = (errno == EAGAIN || errno == EWOULDBLOCK)
                ? make_error(ErrorCode::kIo, "epk client: timed out waiting for epkd's reply")
                : make_errno_error("epk client: recv", errno);
      } else {
        n = static_cast<std::size_t>(r);
      }
    }
    if (!n) {
      sock.reset();
      return std::move(n).error();
    }
    if (*n == 0) {
      sock.reset();
      return make_error(ErrorCode::kIo, "epk client: epkd closed the connection");
    }
    rx_have += *n;
  }
}

Result<Frame> Client::Impl::call_empty(shm::MsgType type) {
  const std::uint32_t id = next_id++;
  shm::encode_empty(id, type, &tx);
  return call(id, type);
}

Result<Frame> Client::Impl::call(std::uint32_t id, shm::MsgType expect, std::vector<shm::UniqueFd>* fds) {
  if (!sock.valid()) return make_error(ErrorCode::kIo, "epk client: not connected");
  const Status sent = send_all(tx);
  if (!sent && !sock.valid()) return sent.error();
  for (;;) {
    auto next = next_frame(fds);
    if (!next || (!sent && next->header.type != static_cast<std::uint16_t>(shm::MsgType::kError))) {
      if (sent) return next.error();
      sock.reset();  // the peer closed without an error frame: the send's error says what happened
      return sent.error();
    }
    Frame f = *next;
    if (f.header.type == static_cast<std::uint16_t>(shm::MsgType::kError)) {
      auto e = shm::decode_error(f.payload);
      if (!e) return make_error(ErrorCode::kBadInput, "epk client: " + e.error().message);
      if (f.header.request_id != id && f.header.request_id != 0) {
        if (forget_nowait(f.header.request_id)) ++deferred_release_errors;
        continue;
      }
      if (e->status == shm::WireStatus::kBadMessage || e->status == shm::WireStatus::kBadVersion) sock.reset();
      return make_error(code_for(e->status),
                        std::string("epkd: ") + shm::wire_status_name(e->status) + ": " + e->message);
    }
    if (f.header.request_id != id) continue;  // a reply to an abandoned request
    if (f.header.type != (static_cast<std::uint16_t>(expect) | shm::kReplyBit)) {
      sock.reset();
      return make_error(ErrorCode::kBadInput, std::string("epk client: expected a ") +
                                                  shm::msg_type_name(static_cast<std::uint16_t>(expect)) + " reply");
    }
    return f;
  }
}

}  // namespace epk::client
