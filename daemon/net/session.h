// One client connection of epkd, in the manner of Boost.Beast's session-per-connection servers: the session owns the
// socket, reads frames into a fixed buffer, hands each whole frame to its RequestHandler (daemon/net/request_handler.h: the service) and writes the
// replies in order. Everything about a session runs on its own io_context's thread (other threads post to
// executor()), so its handlers never run concurrently; it lives while a read, a write or a timer holds it
// (shared_from_this).
//
// - Framing: frames are decoded in place from the read buffer; a frame is handled once it is whole. The first frame
//   must be hello; its reply carries the pool fds of the session's trust domain.
// - Timeouts: a started frame (and the first hello) must arrive whole within read_timeout_ms of its first byte (a
//   client that trickles bytes does not extend it); between frames a session may stay idle for ever unless
//   idle_timeout_ms is set (a client may hold pins while it computes).
// - Write queue: a reply goes out by one non-blocking send when nothing is queued; what the socket does not take is
//   appended to one buffer written by one write chain, so replies leave in the order they were made. A reply with
//   fds (send_with_fds) waits behind the queued bytes. A client that leaves more than kMaxPendingReplyBytes unread is
//   dropped.
// - Allocation: a cache hit allocates nothing here: the acquire request, the reply being encoded and both output
//   buffers are the session's, reserved once at its start.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/net/handler_memory.h"
#include "daemon/net/peer_access.h"
#include "daemon/net/request_handler.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk::daemon::server {

// Sessions use the io_context's own executor type, not the type-erased any_io_executor: completions are then invoked
// directly, with no type-erased function (and its allocation) per operation.
using Executor = boost::asio::io_context::executor_type;
using Socket = boost::asio::basic_stream_socket<boost::asio::local::stream_protocol, Executor>;
using Clock = std::chrono::steady_clock;
using Timer = boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, Executor>;

// Replies not yet written to a client that does not read them: past this the session is dropped.
constexpr std::size_t kMaxPendingReplyBytes = 8u << 20;
// A session's read buffer at first; it grows to the longest message received (at most shm::kMaxMessage).
constexpr std::size_t kInitialReadBuffer = 4096;

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `io_index`: the index of the io thread (and context) that runs it, its reader slot in the lane locks.
  // For a peer the accept loop admitted (Service::admit).
  Session(Socket sock, RequestHandler& svc, ClientId id, std::size_t io_index, int read_timeout_ms, int idle_timeout_ms,
          PeerCredentials peer, std::uint32_t domain);

  ClientId id() const { return id_; }
  std::size_t io_index() const { return io_index_; }
  const PeerCredentials& peer() const { return peer_; }  // from the kernel at accept
  std::uint32_t domain() const { return domain_; }        // its trust domain: the only lanes it is served from
  Socket::executor_type executor() { return sock_.get_executor(); }
  bool open() const { return open_ && !closing_; }

  // Begins reading on the session's own thread.
  static void start(const std::shared_ptr<Session>& self);

  // Queues one encoded reply (see the write queue above). Copies `msg` only when the socket does not take it whole.
  void send(std::span<const std::uint8_t> msg);
  // A reply that carries fds (SCM_RIGHTS): sent at once when nothing is queued, else after the queued replies, so
  // replies keep their order. One at a time: a second while one waits is refused (libepk waits for each reply). The
  // fds stay owned by the caller's objects (a lane's tier, a model's file), which outlive the session.
  void send_with_fds(std::vector<std::uint8_t> msg, std::vector<int> fds);
  // An error reply to request `request_id`; the session stays open.
  void send_error(std::uint32_t request_id, shm::WireStatus status, const std::string& message);
  // An error reply, then the session closes once its queued replies are written; fail() logs it first.
  void fail(std::uint32_t request_id, shm::WireStatus status, const std::string& message);
  void close_with_error(std::uint32_t request_id, shm::WireStatus status, const std::string& message);

  // The session's own buffers for encoding a reply on its thread (reused: no allocation per message).
  shm::AcquireReply& reply_scratch() { return reply_; }
  std::vector<std::uint8_t>& scratch() { return scratch_; }

  // Shutdown: stop reading; queued replies still go out, then the socket closes.
  void stop();

  // Runs f(session) later on the session's own thread, guarded as its requests are (an exception ends that session
  // only), if the session still lives: for a reply that waits on something else (a host tier's seal). Callable from
  // any thread; the queued handler holds the only reference it takes, so the session is never destroyed here.
  static void post_guarded(const std::weak_ptr<Session>& weak, std::function<void(Session&)> f);

 private:
  // Handles every complete frame in the buffer, then reads more (or ends the session).
  void read_more();
  void on_read(boost::system::error_code ec, std::size_t n);
  void handle_frame(const shm::FrameHeader& h, std::span<const std::uint8_t> payload);
  void on_hello(std::uint32_t req, std::span<const std::uint8_t> payload);
  // Pins die with the connection; queued replies still go out before the socket closes.
  void end();
  // A session that throws still ends like any other: logged, and the client's pins dropped.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      end_after_exception(std::current_exception());
    }
  }
  void end_after_exception(std::exception_ptr e);
  void do_write();
  void close_now();
  // The read deadline after the bytes read so far: a message that began (or the hello awaited) must be whole by
  // read_timeout_ms after it began; between messages, idle_timeout_ms when set. `consumed`: frames were handled.
  void update_deadline(bool consumed);
  void arm_timer(std::chrono::milliseconds after);
  std::string timeout_message() const;

  Socket sock_;
  Timer timer_;
  RequestHandler& svc_;
  ClientId id_;
  std::size_t io_index_;
  int read_timeout_ms_;
  int idle_timeout_ms_;
  PeerCredentials peer_;
  std::uint32_t domain_;
  Clock::time_point message_deadline_{};  // while partial_: when the started message must be whole
  std::vector<std::uint8_t> buf_;
  std::size_t have_ = 0;
  shm::AcquireRequest acquire_;        // decoded into in place: its tensor name keeps its capacity
  shm::AcquireReply reply_;            // encoded from in place
  std::vector<std::uint8_t> scratch_;  // one encoded reply
  std::vector<std::uint8_t> pending_;  // replies waiting for the write in progress
  std::vector<std::uint8_t> out_;      // the bytes being written
  bool writing_ = false;
  std::vector<std::uint8_t> fd_reply_;  // a reply with fds waiting for the queue to drain (send_with_fds)
  // Its fds, duplicated when it is queued: the caller's may close before the reply goes out (a model retired at a
  // reload closes its file and tier), and a closed number may be reused by another open.
  std::vector<shm::UniqueFd> fd_reply_fds_;
  bool closing_ = false;  // stop reading, close after the queue drains
  bool open_ = true;
  bool hello_done_ = false;
  std::uint64_t read_gen_ = 0;  // the armed timer's generation: a timer of an older one does nothing
  bool timed_out_ = false;
  bool partial_ = false;     // the read in progress continues a started message (or waits for hello): timed
  bool idle_timed_ = false;  // the armed timer is the idle timeout (not a started message's)
  bool gone_ = false;        // Service::client_gone has been called
  HandlerMemory read_memory_, write_memory_;  // the state of the read and of the write in progress
};

}  // namespace epk::daemon::server
