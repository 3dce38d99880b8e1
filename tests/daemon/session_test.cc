// Session's write queue (daemon/net/session.h) over a real socketpair: replies leave in the order they were made, a reply
// with fds waits behind the queued bytes and carries its fds, a second one while one waits is refused, and a client
// that does not read is dropped past kMaxPendingReplyBytes. The daemon end's send buffer is shrunk so that the first
// reply cannot leave at once and everything after it takes the queue.
#include "daemon/net/session.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "daemon/lanes/device_lanes.h"
#include "daemon/service/service.h"
#include "shm/fd_passing.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk::daemon::server {
namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 9));
  return v;
}

// A host-lane service (the session only needs one to exist) and a session on one end of a socketpair whose send
// buffer is small; the test reads the other end.
struct Fixture {
  boost::asio::io_context io{1};
  DaemonConfig cfg;
  std::unique_ptr<Service> svc;
  std::shared_ptr<Session> session;
  shm::UniqueFd peer;

  Fixture() {
    cfg.serving = ServingMode::kHost;
    cfg.budget_bytes = 1u << 20;
    cfg.threads = 1;
    auto lanes = make_lanes(cfg);
    EXPECT_TRUE(lanes) << lanes.error().to_string();
    svc = std::make_unique<Service>(io, cfg, std::move(*lanes), 1, shm::StatusTable{});
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    const int small = 4096;
    EXPECT_EQ(::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    peer = shm::UniqueFd(sv[1]);
    Socket sock(io.get_executor(), boost::asio::local::stream_protocol(), sv[0]);
    session = std::make_shared<Session>(std::move(sock), *svc, 1, 0, 5000, 0, PeerCredentials{}, 0);
  }
  ~Fixture() {
    session.reset();
    io.run();  // nothing left but the handlers of a closed socket
  }

  // Reads until `want` bytes (or the end of the stream), with the io context run on another thread meanwhile.
  // `fd_at`: for each fd received, the stream offset just past the read that delivered it.
  std::vector<std::uint8_t> read_all(std::size_t want, std::vector<shm::UniqueFd>* fds, std::vector<std::size_t>* fd_at,
                                     bool until_eof = false) {
    std::thread runner([this] { io.run(); });
    std::vector<std::uint8_t> got;
    std::vector<std::uint8_t> buf(1 << 16);
    while (until_eof || got.size() < want) {
      const std::size_t before = fds->size();
      auto n = shm::recv_with_fds(peer.get(), buf, fds);
      if (!n || *n == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*n));
      for (std::size_t i = before; i < fds->size(); ++i) fd_at->push_back(got.size());
    }
    runner.join();
    io.restart();
    return got;
  }
};

std::vector<std::uint8_t> concat(std::initializer_list<const std::vector<std::uint8_t>*> parts) {
  std::vector<std::uint8_t> all;
  for (const auto* p : parts) all.insert(all.end(), p->begin(), p->end());
  return all;
}

// The fd is usable on the reading side: what goes into the pipe comes out of the received read end.
void expect_pipe_passed(int write_end, const shm::UniqueFd& received) {
  const char msg[] = "through the passed fd";
  ASSERT_EQ(::write(write_end, msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  char back[sizeof msg] = {};
  ASSERT_EQ(::read(received.get(), back, sizeof back), static_cast<ssize_t>(sizeof msg));
  EXPECT_STREQ(back, msg);
}

TEST(SessionWrites, RepliesLeaveInOrderAndTheFdsRideBehindTheQueuedBytes) {
  Fixture f;
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const shm::UniqueFd pipe_read(p[0]), pipe_write(p[1]);
  const auto big = pattern(300000, 1), small = pattern(777, 2), with_fds = pattern(123, 3), after = pattern(55, 4);
  f.session->send(big);  // the socket takes a few KiB: the rest goes to the write chain
  f.session->send(small);
  f.session->send_with_fds(with_fds, {pipe_read.get()});  // waits for the queue
  std::vector<shm::UniqueFd> fds;
  std::vector<std::size_t> fd_at;
  const auto got = f.read_all(big.size() + small.size() + with_fds.size(), &fds, &fd_at);
  EXPECT_EQ(got, concat({&big, &small, &with_fds}));
  ASSERT_EQ(fds.size(), 1u);
  // Not before the bytes queued ahead of it: the read that brought it ended inside its reply.
  EXPECT_GT(fd_at[0], big.size() + small.size());
  expect_pipe_passed(pipe_write.get(), fds[0]);
  // With the queue empty a reply with fds goes out at once, and plain replies follow it.
  f.session->send_with_fds(with_fds, {pipe_read.get()});
  f.session->send(after);
  fds.clear();
  fd_at.clear();
  EXPECT_EQ(f.read_all(with_fds.size() + after.size(), &fds, &fd_at), concat({&with_fds, &after}));
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_LE(fd_at[0], with_fds.size() + after.size());
  EXPECT_TRUE(f.session->open());
}

TEST(SessionWrites, AQueuedReplyKeepsItsFdsWhenTheCallersCloseAndTheirNumbersAreReused) {
  // open_stored hands a model's file and tier; a reload may retire the model and close both while the reply waits.
  Fixture f;
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  shm::UniqueFd pipe_read(p[0]);
  const shm::UniqueFd pipe_write(p[1]);
  const auto big = pattern(300000, 5), with_fds = pattern(99, 6);
  f.session->send(big);
  const int number = pipe_read.get();
  f.session->send_with_fds(with_fds, {number});  // queued behind `big`
  pipe_read.reset();                             // the caller's fd goes...
  int q[2];
  ASSERT_EQ(::pipe(q), 0);  // ...and its number is taken by another file
  ASSERT_EQ(::dup2(q[0], number), number);
  ::close(q[0]);
  const shm::UniqueFd other_read(number), other_write(q[1]);
  std::vector<shm::UniqueFd> fds;
  std::vector<std::size_t> fd_at;
  EXPECT_EQ(f.read_all(big.size() + with_fds.size(), &fds, &fd_at), concat({&big, &with_fds}));
  ASSERT_EQ(fds.size(), 1u);
  expect_pipe_passed(pipe_write.get(), fds[0]);  // the file the reply was made with, not the number's new owner
}

TEST(SessionWrites, ASecondReplyWithFdsWhileOneWaitsIsRefusedAndTheSessionCloses) {
  Fixture f;
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const shm::UniqueFd pipe_read(p[0]), pipe_write(p[1]);
  const auto big = pattern(200000, 5), first = pattern(64, 6), second = pattern(64, 7);
  f.session->send(big);
  f.session->send_with_fds(first, {pipe_read.get()});
  f.session->send_with_fds(second, {pipe_read.get()});
  EXPECT_FALSE(f.session->open());  // closing: no more requests are read
  std::vector<shm::UniqueFd> fds;
  std::vector<std::size_t> fd_at;
  const auto got = f.read_all(0, &fds, &fd_at, /*until_eof=*/true);
  // The queued bytes, the refusal, then the reply that was waiting (with its fd), then the end of the stream.
  ASSERT_GT(got.size(), big.size() + shm::kHeaderSize);
  EXPECT_TRUE(std::equal(big.begin(), big.end(), got.begin()));
  const std::span<const std::uint8_t> rest(got.data() + big.size(), got.size() - big.size());
  auto h = shm::decode_header(rest);
  ASSERT_TRUE(h) << h.error().to_string();
  ASSERT_GE(rest.size(), shm::kHeaderSize + h->payload_size + first.size());
  auto err = shm::decode_error(rest.subspan(shm::kHeaderSize, h->payload_size));
  ASSERT_TRUE(err) << err.error().to_string();
  EXPECT_EQ(err->status, shm::WireStatus::kBadMessage);
  EXPECT_EQ(err->message, "a reply with fds is already waiting");
  const auto tail = rest.subspan(shm::kHeaderSize + h->payload_size);
  EXPECT_EQ(std::vector<std::uint8_t>(tail.begin(), tail.end()), first);
  ASSERT_EQ(fds.size(), 1u);
  expect_pipe_passed(pipe_write.get(), fds[0]);
}

TEST(SessionWrites, AClientThatReadsNothingIsDroppedPastThePendingLimit) {
  Fixture f;
  const auto chunk = pattern(shm::kMaxMessage, 8);
  std::size_t sent = 0;
  while (f.session->open() && sent < 2 * kMaxPendingReplyBytes) {
    f.session->send(chunk);
    sent += chunk.size();
  }
  EXPECT_FALSE(f.session->open());
  EXPECT_GT(sent, kMaxPendingReplyBytes);
  EXPECT_LE(sent, kMaxPendingReplyBytes + 2 * chunk.size());
  // The peer then sees the stream end (after whatever the socket had taken).
  std::vector<shm::UniqueFd> fds;
  std::vector<std::size_t> fd_at;
  const auto got = f.read_all(0, &fds, &fd_at, /*until_eof=*/true);
  EXPECT_LT(got.size(), sent);
  EXPECT_TRUE(fds.empty());
}

}  // namespace
}  // namespace epk::daemon::server
