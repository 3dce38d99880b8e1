// Test harness: starts the real epkd (EPKD_PATH) on a temporary socket and client processes (TEST_CLIENT_PATH);
// every wait is bounded. Header-only, for the integration tests of tests/daemon and tests/client.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/support/read_file.h"

namespace epk::test_harness {

using Clock = std::chrono::steady_clock;
using client::Client;
using test::read_file;

struct Child {
  pid_t pid = -1;
  int out = -1;  // the child's stdout, when captured
  int in = -1;   // the child's stdin, when captured (a gate the test opens by writing a byte)
};

inline Child spawn(const std::vector<std::string>& args, bool capture_stdout, const std::string& stderr_path = "",
                   bool capture_stdin = false) {
  int pipefd[2] = {-1, -1};
  int infd[2] = {-1, -1};
  if (capture_stdout && ::pipe2(pipefd, O_CLOEXEC) != 0) return {};
  if (capture_stdin && ::pipe2(infd, O_CLOEXEC) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    if (capture_stdout) ::dup2(pipefd[1], 1);
    if (capture_stdin) ::dup2(infd[0], 0);
    if (!stderr_path.empty()) {
      int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (capture_stdout) ::close(pipefd[1]);
  if (capture_stdin) ::close(infd[0]);
  return {pid, capture_stdout ? pipefd[0] : -1, capture_stdin ? infd[1] : -1};
}

// Exit code, or -1 (and the child is killed) when it does not exit within timeout_ms.
inline int wait_exit(pid_t pid, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

inline std::string read_line(int fd, int timeout_ms) {
  std::string line;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    char ch;
    if (::read(fd, &ch, 1) != 1) break;
    if (ch == '\n') return line;
    line += ch;
  }
  return line;
}

// The open fds of process `pid`.
inline std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    ++n;
  }
  return n;
}

// Whether epkd's heap can be measured: under AddressSanitizer freed memory sits in its quarantine (hundreds of MiB),
// so RSS bounds are checked only in builds without it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kHeapMeasurable = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kHeapMeasurable = false;
#else
inline constexpr bool kHeapMeasurable = true;
#endif
#else
inline constexpr bool kHeapMeasurable = true;
#endif

// Anonymous resident memory of process `pid` (the heap; the pool's shared pages are not counted).
inline std::uint64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "RssAnon:") {
      std::uint64_t v = 0;
      in >> v;
      return v;
    }
    std::getline(in, key);
  }
  return 0;
}

// SIGTERM to *pid and its exit code (-1, the child killed, when it does not exit within 5 s); *pid becomes -1.
inline int terminate_child(pid_t* pid) {
  ::kill(*pid, SIGTERM);
  const int rc = wait_exit(*pid, 5000);
  *pid = -1;
  return rc;
}

// SIGKILL to a child still running (pid > 0) and its reaping: what a test leaves behind when it stops early.
inline void kill_child(pid_t pid) {
  if (pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}

// epkd's log (its stderr, at `path`) on this process's stderr when the running test has failed, for its reader.
inline void print_log_if_failed(const std::string& path) {
  if (::testing::Test::HasFailure()) {
    std::fprintf(stderr, "---- epkd log ----\n%s------------------\n", read_file(path).c_str());
  }
}

// The pin count that `pins_of` reads from c's stats, read every 5 ms until it is 0 or `ms` have passed (at least
// once); a failed stats call's error.
inline Result<std::uint64_t> pins_after_wait(Client& c,
                                             const std::function<std::uint64_t(const client::Stats&)>& pins_of,
                                             int ms = 1000) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    auto st = c.stats();
    if (!st) return std::move(st).error();
    const std::uint64_t pins = pins_of(*st);
    if (pins == 0 || Clock::now() >= deadline) return pins;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

class Epkd {
 public:
  // kHost passes --cpu (host pools, the CPU decoder); kDevice leaves epkd to pick the device path where a GPU is.
  enum class Path { kHost, kDevice };
  // `socket` empty: a fresh temporary directory holds the socket (and the log).
  explicit Epkd(std::vector<std::string> extra, std::string budget_mb = "1", std::string socket = "",
                Path path = Path::kHost) {
    char tmpl[] = "/tmp/epkdtest.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    socket_ = socket.empty() ? dir_ + "/epkd.sock" : socket;
    log_ = dir_ + "/epkd.log";
    std::vector<std::string> args = {EPKD_PATH,      "--socket", socket_, "--budget-mb", budget_mb, "--read-timeout-ms",
                                     "300",          "--check-invariants", "--io-threads", "3",     "--log-level",
                                     "info"};
    if (path == Path::kHost) args.push_back("--cpu");
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = spawn(args, false, log_).pid;
    // The device path uploads every model's resident tier before it listens.
    auto deadline = Clock::now() + std::chrono::seconds(path == Path::kHost ? 10 : 30);
    while (Clock::now() < deadline) {
      if (Client::connect(socket_, 2000)) return;
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Epkd() {
    kill_child(pid_);
    print_log_if_failed(log_);
    std::filesystem::remove_all(dir_);
  }
  bool running() const { return pid_ > 0; }
  const std::string& socket() const { return socket_; }
  const std::string& log_path() const { return log_; }  // epkd's stderr (gone once this object is)
  pid_t pid() const { return pid_; }

  // SIGTERM and the exit code (-1 when it does not exit within 5 s).
  int terminate() { return terminate_child(&pid_); }

  // A client of this epkd: an error when epkd is not running (it exited or never listened) or the connect fails.
  Result<Client> connect(int reply_timeout_ms = 60000) const {
    if (!running()) return make_error(ErrorCode::kInternal, "epkd is not running (its log follows the test)");
    return Client::connect(socket_, reply_timeout_ms);
  }

  client::Stats stats() {
    auto c = Client::connect(socket_, 2000);
    EXPECT_TRUE(c) << c.error().to_string();
    if (!c) return {};
    auto s = c->stats();
    EXPECT_TRUE(s) << s.error().to_string();
    return s ? *s : client::Stats{};
  }

  // epk_test_client SUBCOMMAND SOCKET ARGS...; `gated`: it connects, prints "connected" and waits for a byte on stdin.
  Child client(std::vector<std::string> args, bool gated = false) {
    args.insert(args.begin(), {TEST_CLIENT_PATH, args[0], socket_});
    args.erase(args.begin() + 3);
    if (gated) args.push_back("gate");
    return spawn(args, true, "", gated);
  }

 private:
  std::string dir_, socket_, log_;
  pid_t pid_ = -1;
};

// The daemon still serves a fresh client: tensor t0 of model m (a synthetic model's first tensor) in dense fp32.
inline void expect_serving(Epkd& d) {
  auto c = Client::connect(d.socket(), 2000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto t = c->acquire("m", "t0", shm::Layout::kDenseF32);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_TRUE(c->release(t->handle));
}

}  // namespace epk::test_harness
