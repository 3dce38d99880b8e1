// client::Client's destructor and move assignment do not wait on the daemon: against a peer that answers hello and
// then never reads or answers again, they return at once (the reply timeout is 20 s here), after sending close
// without blocking and shutting the socket.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "shm/fd_passing.h"
#include "shm/pool.h"
#include "shm/protocol.h"
#include "shm/unique_fd.h"

namespace epk {
namespace {

using Clock = std::chrono::steady_clock;
using client::Client;

constexpr int kReplyTimeoutMs = 20000;

// Accepts connections; answers each hello with one host pool and then goes silent: it reads nothing more until the
// test asks what arrived (drain()).
class SilentDaemon {
 public:
  SilentDaemon() {
    path_ = (std::filesystem::temp_directory_path() / ("epk_silent_" + std::to_string(::getpid()) + ".sock")).string();
    ::unlink(path_.c_str());
    listen_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    ok_ = listen_.valid() && ::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          ::listen(listen_.get(), 8) == 0;
    auto pool = shm::HostPool::create("epk-silent", 1 << 20);
    ok_ = ok_ && static_cast<bool>(pool);
    if (pool) pool_ = std::move(*pool);
  }
  ~SilentDaemon() { ::unlink(path_.c_str()); }

  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }

  // Accepts one connection and answers its hello (call while a client connects on another thread).
  bool accept_one() {
    shm::UniqueFd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c.valid()) return false;
    std::uint8_t buf[shm::kHeaderSize + 8];
    std::size_t have = 0;
    while (have < sizeof(buf)) {
      ssize_t n = ::recv(c.get(), buf + have, sizeof(buf) - have, 0);
      if (n <= 0) return false;
      have += static_cast<std::size_t>(n);
    }
    auto h = shm::decode_header(std::span<const std::uint8_t>(buf, sizeof(buf)));
    if (!h || h->type != static_cast<std::uint16_t>(shm::MsgType::kHello)) return false;
    shm::HelloReply r;
    r.pools.push_back({0, shm::PoolKind::kHost, -1, pool_->size()});
    std::vector<std::uint8_t> out;
    shm::encode_hello_reply(h->request_id, r, &out);
    int fd = pool_->export_fd();
    if (!shm::send_with_fds(c.get(), out, std::span<const int>(&fd, 1), 1000)) return false;
    conns_.push_back(std::move(c));
    return true;
  }

  // What connection i received after its hello, up to end of stream (bounded wait); nullopt if it did not end.
  std::optional<std::vector<std::uint8_t>> drain(std::size_t i) {
    timeval tv{2, 0};
    ::setsockopt(conns_[i].get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::vector<std::uint8_t> got;
    std::uint8_t buf[4096];
    for (;;) {
      ssize_t n = ::recv(conns_[i].get(), buf, sizeof(buf), 0);
      if (n == 0) return got;
      if (n < 0) return std::nullopt;
      got.insert(got.end(), buf, buf + n);
    }
  }

 private:
  std::string path_;
  shm::UniqueFd listen_;
  std::unique_ptr<shm::HostPool> pool_;
  std::vector<shm::UniqueFd> conns_;
  bool ok_ = false;
};

Result<Client> connect_to(SilentDaemon& d) {
  std::atomic<bool> accepted{false};
  std::thread t([&] { accepted = d.accept_one(); });
  auto c = Client::connect(d.path(), kReplyTimeoutMs);
  t.join();
  if (!accepted) return make_error(ErrorCode::kIo, "the silent daemon did not accept");
  return c;
}

// The close message alone, then end of stream.
void expect_close_then_eof(const std::optional<std::vector<std::uint8_t>>& got) {
  ASSERT_TRUE(got.has_value()) << "the client left its socket open";
  ASSERT_EQ(got->size(), shm::kHeaderSize);
  auto h = shm::decode_header(*got);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->type, static_cast<std::uint16_t>(shm::MsgType::kClose));
  EXPECT_EQ(h->payload_size, 0u);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TEST(ClientClose, DestructorDoesNotWaitForASilentDaemon) {
  SilentDaemon d;
  ASSERT_TRUE(d.ok());
  auto c = connect_to(d);
  ASSERT_TRUE(c) << c.error().to_string();
  auto t0 = Clock::now();
  {
    Client gone = std::move(*c);
  }
  EXPECT_LT(seconds_since(t0), 1.0);
  expect_close_then_eof(d.drain(0));
}

TEST(ClientClose, MoveAssignmentDoesNotWaitForASilentDaemon) {
  SilentDaemon d;
  ASSERT_TRUE(d.ok());
  auto a = connect_to(d);
  ASSERT_TRUE(a) << a.error().to_string();
  auto b = connect_to(d);
  ASSERT_TRUE(b) << b.error().to_string();
  auto t0 = Clock::now();
  *a = std::move(*b);  // a's own connection (the first) is closed
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_TRUE(a->connected());
  expect_close_then_eof(d.drain(0));
  t0 = Clock::now();
  a = make_error(ErrorCode::kIo, "dropped");  // destroys the Client holding the second connection
  EXPECT_LT(seconds_since(t0), 1.0);
  expect_close_then_eof(d.drain(1));
}

TEST(ClientClose, ExplicitDisconnectStillWaitsForTheAnswer) {
  // disconnect() is the blocking form: against a silent daemon it waits for the reply timeout. A short one here.
  SilentDaemon d;
  ASSERT_TRUE(d.ok());
  std::thread t([&] { d.accept_one(); });
  auto c = Client::connect(d.path(), 300);
  t.join();
  ASSERT_TRUE(c) << c.error().to_string();
  auto t0 = Clock::now();
  c->disconnect();
  EXPECT_GE(seconds_since(t0), 0.25);
  EXPECT_FALSE(c->connected());
}

}  // namespace
}  // namespace epk
