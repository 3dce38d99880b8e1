// The metrics endpoint of the real epkd (CPU path) under local users who may not trust each other: silent
// connections cannot hold a scrape (or epkd's fds) behind them, models with uids/gids stay out of the metrics unless
// the config opts in, and metrics_listen can neither name the serving socket nor take over another listener's socket.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/net/metrics.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/daemon/raw_wire.h"
#include "tests/support/scratch_dir.h"

namespace epk {
namespace {

namespace fs = std::filesystem;
using namespace epk::test_harness;  // NOLINT

// A connect() to 127.0.0.1:port that does not wait for the handshake (a full backlog cannot stall the test).
int tcp_connect_nonblocking(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `req` on fd (non-blocking) and reads until the server closes or `deadline`; what arrived.
std::string exchange(int fd, const std::string& req, Clock::time_point deadline) {
  std::size_t sent = 0;
  std::string out;
  while (Clock::now() < deadline) {
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    pollfd p{fd, static_cast<short>(sent < req.size() ? POLLOUT : POLLIN), 0};
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    if (sent < req.size()) {
      const ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
      else if (n < 0 && errno != EAGAIN) break;
      continue;
    }
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
    else if (errno != EAGAIN) break;
  }
  return out;
}

std::string scrape_tcp(std::uint16_t port, int timeout_ms) {
  const int fd = tcp_connect_nonblocking(port);
  if (fd < 0) return {};
  std::string out =
      exchange(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Clock::now() + std::chrono::milliseconds(timeout_ms));
  ::close(fd);
  return out;
}

std::string scrape_unix(const std::string& path) {
  const int fd = raw_connect(path);
  if (fd < 0) return {};
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string out = exchange(fd, "GET /metrics HTTP/1.0\r\n\r\n", Clock::now() + std::chrono::seconds(5));
  ::close(fd);
  return out;
}

// The port epkd logged for "metrics on http://127.0.0.1:PORT/metrics" (0 when it has not).
std::uint16_t logged_port(const std::string& log) {
  std::smatch m;
  const std::string text = read_file(log);
  if (!std::regex_search(text, m, std::regex("metrics on http://127\\.0\\.0\\.1:([0-9]+)/metrics"))) return 0;
  return static_cast<std::uint16_t>(std::stoul(m[1]));
}

std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) ++n;
  return n;
}

// Whether the peer closed fd (recv reads end of stream) within `ms`.
bool closed_by_peer(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

// Polls `done` every 50 ms for up to `ms`.
template <class F>
bool eventually_true(F done, int ms = 5000) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

class EpkdMetrics : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = epk::test::test_scratch_dir("epkd_metrics"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  fs::path dir_;
};

TEST_F(EpkdMetrics, ScrapeIsServedAtOnceBehindManySilentConnections) {
  Epkd d({"--synthetic", "toy=w:8x8", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(d.running());
  const std::uint16_t port = logged_port(d.log_path());
  ASSERT_NE(port, 0) << read_file(d.log_path());
  const std::size_t fds_before = open_fds(d.pid());
  // More silent peers than the server keeps: each would hold a one-at-a-time server for its whole deadline.
  constexpr std::size_t kSilent = daemon::MetricsServer::kMaxConnections + 16;
  std::vector<int> silent;
  for (std::size_t i = 0; i < kSilent; ++i) {
    const int fd = tcp_connect_nonblocking(port);
    ASSERT_GE(fd, 0);
    silent.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted by now
  const auto t0 = Clock::now();
  const std::string text = scrape_tcp(port, 10000);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(text.find("HTTP/1.1 200 OK"), std::string::npos) << text;
  EXPECT_NE(text.find("epkd_models 1\n"), std::string::npos) << text;
  EXPECT_LT(seconds, 3.0) << "the scrape waited behind the silent connections";
  // The silent ones hold at most the server's bound of fds, and every one is closed at its own deadline.
  EXPECT_LE(open_fds(d.pid()), fds_before + daemon::MetricsServer::kMaxConnections);
  // A connect beyond the listen backlog is accepted only after the kernel's SYN retry (1 s, then 3 s): the bound
  // leaves room for the second retry, and is still far below the serial 2 s per connection.
  const int wait_ms = daemon::MetricsServer::kConnectionDeadlineMs + 4500;
  const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
  std::size_t still_open = 0;
  for (int fd : silent) {
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (!closed_by_peer(fd, std::max(left, 1))) ++still_open;
    ::close(fd);
  }
  EXPECT_EQ(still_open, 0u) << "connections epkd had not closed " << wait_ms << " ms after they were opened";
}

TEST_F(EpkdMetrics, ModelsWithUidsOrGidsStayOutUnlessTheConfigOptsIn) {
  const std::string models =
      "[[synthetic]]\nname = \"open-model\"\nspec = \"w:8x8\"\n"
      "[[synthetic]]\nname = \"hidden-model\"\nspec = \"w:8x8,v:4x4\"\nuids = [4242]\n";
  for (const bool opt_in : {false, true}) {
    SCOPED_TRACE(opt_in ? "metrics_restricted_models = true" : "default");
    const std::string metrics = (dir_ / "metrics.sock").string();
    const std::string cfg = write("epkd.toml", std::string(opt_in ? "metrics_restricted_models = true\n" : "") +
                                                   "metrics_listen = \"" + metrics + "\"\n" + models);
    Epkd d({"--config", cfg});
    ASSERT_TRUE(d.running());
    {
      // Root may use the hidden model: a cached slot of it gives it occupancy to leak.
      auto c = d.connect();
      ASSERT_TRUE(c) << c.error().to_string();
      auto t = c->acquire("hidden-model", "w", shm::Layout::kDenseF32);
      ASSERT_TRUE(t) << t.error().to_string();
      ASSERT_TRUE(c->release(t->handle));
    }
    std::string text;
    ASSERT_TRUE(eventually_true([&] {  // rendered once a second
      text = scrape_unix(metrics);
      return text.find("epkd_model_cached_slots{model=\"" + std::string(opt_in ? "hidden" : "open")) !=
             std::string::npos;
    })) << text;
    EXPECT_NE(text.find("epkd_model_tensors{model=\"open-model\"} 1\n"), std::string::npos) << text;
    if (opt_in) {
      EXPECT_NE(text.find("epkd_model_tensors{model=\"hidden-model\"} 2\n"), std::string::npos) << text;
      EXPECT_NE(text.find("epkd_models 2\n"), std::string::npos) << text;
    } else {
      EXPECT_EQ(text.find("hidden-model"), std::string::npos) << text;
      EXPECT_NE(text.find("epkd_models 1\n"), std::string::npos) << text;
    }
  }
}

TEST_F(EpkdMetrics, MetricsListenOnTheServingSocketIsRefused) {
  const std::string sock = (dir_ / "epkd.sock").string();
  for (const std::string& metrics : {sock, (dir_ / "." / "epkd.sock").string()}) {
    SCOPED_TRACE(metrics);
    const std::string cfg = write("epkd.toml", "socket = \"" + sock + "\"\nbudget_mb = 1\nmetrics_listen = \"" +
                                                   metrics + "\"\n[[synthetic]]\nname = \"toy\"\nspec = \"w:8x8\"\n");
    // --check-config: exit 1 naming both keys.
    const std::string err = (dir_ / "check.err").string();
    Child check = spawn({EPKD_PATH, "--check-config", cfg}, true, err);
    EXPECT_EQ(wait_exit(check.pid, 10000), 1);
    ::close(check.out);
    const std::string msg = read_file(err);
    EXPECT_NE(msg.find("metrics_listen"), std::string::npos) << msg;
    EXPECT_NE(msg.find("serving socket"), std::string::npos) << msg;
    fs::remove(err);
    // Start: refused before anything listens (exit 2, the command line's refusal), the path left alone.
    Child start = spawn({EPKD_PATH, "--config", cfg, "--cpu"}, false, err);
    EXPECT_EQ(wait_exit(start.pid, 10000), 2) << read_file(err);
    EXPECT_NE(read_file(err).find("serving socket"), std::string::npos) << read_file(err);
    EXPECT_FALSE(fs::exists(sock));
    fs::remove(err);
  }
  // The same check in-process, as check_config_file runs it; a distinct path passes.
  daemon::DaemonConfig cfg;
  cfg.socket_path = sock;
  cfg.metrics_listen = (dir_ / "sub" / ".." / "epkd.sock").string();
  EXPECT_FALSE(daemon::check_listen_paths(cfg));
  cfg.metrics_listen = (dir_ / "metrics.sock").string();
  EXPECT_TRUE(daemon::check_listen_paths(cfg));
  cfg.metrics_listen = "127.0.0.1:9464";
  EXPECT_TRUE(daemon::check_listen_paths(cfg));
}

TEST_F(EpkdMetrics, ALiveListenerAtTheMetricsPathIsNotTakenOver) {
  const std::string path = (dir_ / "other.sock").string();
  const int other = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  ASSERT_EQ(::bind(other, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(other, 8), 0);
  const std::string err = (dir_ / "epkd.err").string();
  Child e = spawn({EPKD_PATH, "--cpu", "--socket", (dir_ / "epkd.sock").string(), "--budget-mb", "1", "--synthetic",
                   "toy=w:8x8", "--metrics-listen", path},
                  false, err);
  const int rc = wait_exit(e.pid, 10000);  // killed (-1) if it went on serving
  EXPECT_EQ(rc, 1) << read_file(err);
  EXPECT_NE(read_file(err).find("a live socket is listening there"), std::string::npos) << read_file(err);
  // The other listener's socket file is still there, and still reaches it.
  EXPECT_TRUE(fs::exists(path));
  const int c = raw_connect(path);
  EXPECT_GE(c, 0);
  pollfd p{other, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 2000), 1) << "the connect did not reach the other listener";
  if (c >= 0) ::close(c);
  ::close(other);
}

}  // namespace
}  // namespace epk
