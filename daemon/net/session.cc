#include "daemon/log_format.h"
#include "daemon/net/session.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

#include "shm/fd_passing.h"

namespace epk::daemon::server {

namespace asio = boost::asio;

Session::Session(Socket sock, RequestHandler& svc, ClientId id, std::size_t io_index, int read_timeout_ms,
                 int idle_timeout_ms, PeerCredentials peer, std::uint32_t domain)
    : sock_(std::move(sock)),
      timer_(sock_.get_executor()),
      svc_(svc),
      id_(id),
      io_index_(io_index),
      read_timeout_ms_(read_timeout_ms),
      idle_timeout_ms_(idle_timeout_ms),
      peer_(std::move(peer)),
      domain_(domain),
      buf_(kInitialReadBuffer) {
  // Buffers start small and grow to the largest message the session sees (then stay: a hit allocates nothing), so an
  // idle session costs a few KiB, not several kMaxMessage.
  acquire_.tensor.reserve(shm::kMaxTensorName);
  reply_.shape.reserve(shm::kMaxDims);
  reply_.strides.reserve(shm::kMaxDims);
}

void Session::start(const std::shared_ptr<Session>& self) {
  asio::dispatch(self->sock_.get_executor(), [self] { self->guarded([&] { self->read_more(); }); });
}

void Session::send(std::span<const std::uint8_t> msg) {
  if (!open_) return;
  if (!writing_ && pending_.empty()) {
    // Nothing queued (every cache hit and release): one non-blocking send straight from the caller's buffer. No copy
    // into pending_, no asio write operation and no completion handler to run afterwards; only what the socket did
    // not take goes through the write chain below.
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
    spdlog::warn("session_closed client={} {} reason=replies_unread bytes={}", id_, peer_kv(peer_), pending_.size());
    closing_ = true;
    close_now();
    return;
  }
  pending_.insert(pending_.end(), msg.begin(), msg.end());
  if (!writing_) do_write();
}

void Session::send_with_fds(std::vector<std::uint8_t> msg, std::vector<int> fds) {
  if (!open_) return;
  if (writing_ || !pending_.empty()) {
    if (!fd_reply_.empty()) {
      std::vector<std::uint8_t> err;
      shm::encode_error(0, {shm::WireStatus::kBadMessage, "a reply with fds is already waiting"}, &err);
      send(err);
      closing_ = true;
      return;
    }
    std::vector<shm::UniqueFd> held;
    for (int fd : fds) {
      shm::UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
      if (!dup.valid()) {
        spdlog::warn("reply_fd_failed client={} {} error={}", id_, peer_kv(peer_), kv(std::strerror(errno)));
        // The reply's request id (frame header bytes 8..11, little-endian), so the client's call gets the error.
        std::uint32_t request_id = 0;
        for (std::size_t b = 12; b > 8 && msg.size() >= 12; --b) request_id = request_id << 8 | msg[b - 1];
        send_error(request_id, shm::WireStatus::kInternal, "epkd could not keep a reply's file descriptor");
        return;
      }
      held.push_back(std::move(dup));
    }
    fd_reply_ = std::move(msg);
    fd_reply_fds_ = std::move(held);
    return;
  }
  Status st = shm::send_with_fds(sock_.native_handle(), msg, fds, read_timeout_ms_);
  if (!st) {
    spdlog::warn("session_closed client={} {} reason=send_failed error={}", id_, peer_kv(peer_),
                 kv(st.error().to_string()));
    closing_ = true;
    close_now();
  }
}

void Session::send_error(std::uint32_t request_id, shm::WireStatus status, const std::string& message) {
  std::vector<std::uint8_t> out;
  shm::encode_error(request_id, {status, message}, &out);
  send(out);
}

void Session::fail(std::uint32_t request_id, shm::WireStatus status, const std::string& message) {
  spdlog::warn("session_closed client={} {} reason=bad_message error={}", id_, peer_kv(peer_), kv(message));
  close_with_error(request_id, status, message);
}

void Session::close_with_error(std::uint32_t request_id, shm::WireStatus status, const std::string& message) {
  send_error(request_id, status, message);
  closing_ = true;
  if (!writing_) close_now();
}

void Session::post_guarded(const std::weak_ptr<Session>& weak, std::function<void(Session&)> f) {
  std::shared_ptr<Session> self = weak.lock();
  if (!self) return;
  const Socket::executor_type ex = self->executor();
  asio::post(ex, [self = std::move(self), f = std::move(f)] { self->guarded([&] { f(*self); }); });
}

void Session::stop() {
  if (!open_) return;
  boost::system::error_code ec;
  sock_.shutdown(Socket::shutdown_receive, ec);
}

void Session::end_after_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("session_failed client={} {} error={}", id_, peer_kv(peer_), kv(ex.what()));
  } catch (...) {
    spdlog::error("session_failed client={} {} error=unknown", id_, peer_kv(peer_));
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
    std::vector<shm::UniqueFd> held = std::move(fd_reply_fds_);  // closed once sent: the peer has its own copies
    fd_reply_.clear();
    fd_reply_fds_.clear();
    std::vector<int> fds;
    for (const shm::UniqueFd& fd : held) fds.push_back(fd.get());
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

void Session::on_hello(std::uint32_t req, std::span<const std::uint8_t> payload) {
  auto m = shm::decode_hello(payload);
  if (!m) return fail(req, shm::WireStatus::kBadMessage, m.error().message);
  if (hello_done_) return fail(req, shm::WireStatus::kBadMessage, "hello sent twice");
  hello_done_ = true;
  std::vector<std::uint8_t> out;
  shm::encode_hello_reply(req, svc_.hello_reply(domain_), &out);
  // The pool fds ride on the reply. Nothing else is queued before the hello reply, so a direct send keeps order.
  std::vector<int> fds = svc_.pool_fds(domain_);
  Status st = shm::send_with_fds(sock_.native_handle(), out, fds, read_timeout_ms_);
  if (!st) {
    spdlog::warn("session_closed client={} {} reason=hello_reply_failed error={}", id_, peer_kv(peer_),
                 kv(st.error().to_string()));
    closing_ = true;
    close_now();
    return;
  }
  spdlog::debug("client_connected client={} {} domain={}", id_, peer_kv(peer_), domain_);
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
    case MsgType::kHello: return on_hello(req, payload);
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
    case MsgType::kTensors: {
      auto m = shm::decode_tensors(payload);
      if (!m) return malformed(m.error());
      return svc_.on_tensors(*this, req, *m);
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
  std::size_t need = 0;  // the bytes of the message that is not whole yet (its header read)
  while (open() && have_ - pos >= shm::kHeaderSize) {
    auto h = shm::decode_header(std::span<const std::uint8_t>(buf_.data() + pos, have_ - pos));
    if (!h) {
      fail(0, h.error().code == ErrorCode::kUnsupported ? shm::WireStatus::kBadVersion : shm::WireStatus::kBadMessage,
           h.error().message);
      break;
    }
    if (have_ - pos - shm::kHeaderSize < h->payload_size) {
      need = shm::kHeaderSize + h->payload_size;
      break;
    }
    handle_frame(*h, std::span<const std::uint8_t>(buf_.data() + pos + shm::kHeaderSize, h->payload_size));
    pos += shm::kHeaderSize + h->payload_size;
  }
  if (!open()) return end();
  if (pos > 0) {
    std::memmove(buf_.data(), buf_.data() + pos, have_ - pos);
    have_ -= pos;
  }
  // A message longer than the buffer: it grows to hold it (decode_header checked it: at most kMaxMessage).
  if (need > buf_.size()) buf_.resize(need);
  update_deadline(pos > 0);
  if (!open()) return end();
  sock_.async_read_some(asio::buffer(buf_.data() + have_, buf_.size() - have_),
                        with_memory(read_memory_, [self = shared_from_this()](boost::system::error_code ec,
                                                                              std::size_t n) {
                          self->guarded([&] { self->on_read(ec, n); });
                        }));
}

std::string Session::timeout_message() const {
  return have_ > 0 ? "timed out: " + std::to_string(have_) + " bytes of a message in " +
                         std::to_string(read_timeout_ms_) + " ms"
                   : std::string("timed out waiting for hello");
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
    if (Clock::now() >= message_deadline_) fail(0, shm::WireStatus::kBadMessage, timeout_message());
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
      spdlog::info("session_closed client={} {} reason=idle_timeout idle_timeout_ms={}", id_, peer_kv(peer_),
                   idle_timeout_ms_);
    } else if (timed_out_) {
      fail(0, shm::WireStatus::kBadMessage, timeout_message());
    } else if (have_ > 0 && ec == asio::error::eof) {
      fail(0, shm::WireStatus::kBadMessage,
           "truncated message: the stream ended after " + std::to_string(have_) + " bytes of it");
    }
    return end();
  }
  have_ += n;
  read_more();
}

}  // namespace epk::daemon::server
