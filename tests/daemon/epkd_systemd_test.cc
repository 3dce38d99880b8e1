// epkd under systemd's protocols, with systemd played by the test: readiness (READY=1 on a fake $NOTIFY_SOCKET once
// the socket listens, STOPPING=1 on SIGTERM) and socket activation (the listening socket passed as fd 3 with
// $LISTEN_FDS / $LISTEN_PID).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"
#include "codec/container/writer.h"
#include "tests/daemon/epkd_harness.h"
#include "tests/support/scratch_dir.h"

extern char** environ;

namespace epk {
namespace {

namespace fs = std::filesystem;
using client::Client;
using test_harness::kill_child;
using test_harness::print_log_if_failed;
using test_harness::read_file;
using test_harness::terminate_child;
using test_harness::wait_exit;

// A datagram socket standing in for systemd's notify socket; `name` starting with '@' binds an abstract one.
class FakeNotifySocket {
 public:
  explicit FakeNotifySocket(const std::string& name) : name_(name) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    if (name[0] == '@') addr.sun_path[0] = '\0';
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0;
  }
  ~FakeNotifySocket() { ::close(fd_); }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  // The next datagram, or "" after timeout_ms.
  std::string next(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return "";
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool ok_ = false;
};

// Forks epkd with extra environment variables; listen_fd >= 0 becomes fd 3 with LISTEN_FDS=listen_fds and LISTEN_PID
// set to the child's pid, as systemd does.
pid_t spawn_epkd(const std::vector<std::string>& args, const std::vector<std::string>& env, int listen_fd,
                 int listen_fds, const std::string& log) {
  std::vector<std::string> env_store(env);
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "NOTIFY_SOCKET=", 14) != 0 && std::strncmp(*e, "LISTEN_", 7) != 0) env_store.push_back(*e);
  }
  if (listen_fd >= 0) env_store.push_back("LISTEN_FDS=" + std::to_string(listen_fds));
  env_store.push_back("LISTEN_PID=0000000000000000");  // patched in the child (its own pid), or left as a stranger's
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  char* pid_slot = envp[env_store.size() - 1] + std::strlen("LISTEN_PID=");
  std::vector<std::string> argv_store(args);
  argv_store.insert(argv_store.begin(), EPKD_PATH);
  std::vector<char*> argv;
  for (auto& s : argv_store) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) ::dup2(fd, 2);
    if (listen_fd >= 0) {
      if (listen_fd != 3) ::dup2(listen_fd, 3);
      ::fcntl(3, F_SETFD, 0);
      // The child's pid, right-aligned digits in the placeholder (async-signal-safe formatting).
      long v = static_cast<long>(::getpid());
      int i = 15;
      std::memset(pid_slot, '0', 16);
      while (v > 0 && i >= 0) {
        pid_slot[i--] = static_cast<char>('0' + v % 10);
        v /= 10;
      }
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

class EpkdSystemd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epk::test::test_scratch_dir("epkd_sd");
    log_ = (dir_ / "epkd.log").string();
  }
  void TearDown() override {
    kill_child(pid_);
    print_log_if_failed(log_);
    fs::remove_all(dir_);
  }
  int terminate() { return terminate_child(&pid_); }
  // epkd's exit code, waited for up to 5 s (-1, and it is killed, when it has not exited by then).
  int exit_code() {
    const int rc = wait_exit(pid_, 5000);
    pid_ = -1;
    return rc;
  }
  std::string log_text() { return read_file(log_); }

  fs::path dir_;
  std::string log_;
  pid_t pid_ = -1;
};

const std::vector<std::string> kServe = {"--budget-mb", "1", "--cpu", "--synthetic", "m=t0:16x16"};

TEST_F(EpkdSystemd, ReadyIsSentOnceTheSocketListensAndStoppingOnSigterm) {
  FakeNotifySocket notify((dir_ / "notify").string());
  ASSERT_TRUE(notify.ok());
  std::string sock = (dir_ / "epkd.sock").string();
  std::vector<std::string> args = kServe;
  args.insert(args.end(), {"--socket", sock});
  pid_ = spawn_epkd(args, {"NOTIFY_SOCKET=" + notify.name()}, -1, 0, log_);
  std::string ready = notify.next(10000);
  ASSERT_NE(ready.find("READY=1"), std::string::npos) << ready;
  EXPECT_NE(ready.find("MAINPID=" + std::to_string(pid_)), std::string::npos) << ready;
  EXPECT_NE(ready.find("STATUS=serving 1 model(s)"), std::string::npos) << ready;
  // No wait: the socket already listens when READY=1 arrives.
  auto c = Client::connect(sock, 5000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto t = c->acquire("m", "t0", shm::Layout::kStored);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_TRUE(c->release(t->handle));
  c->disconnect();
  ::kill(pid_, SIGTERM);
  EXPECT_NE(notify.next(5000).find("STOPPING=1"), std::string::npos);
  EXPECT_EQ(exit_code(), 0);
  EXPECT_FALSE(fs::exists(sock));  // a socket epkd made itself is removed
}

TEST_F(EpkdSystemd, AbstractNotifySocket) {
  FakeNotifySocket notify("@epkd-test-" + std::to_string(::getpid()));
  ASSERT_TRUE(notify.ok());
  std::vector<std::string> args = kServe;
  args.insert(args.end(), {"--socket", (dir_ / "epkd.sock").string()});
  pid_ = spawn_epkd(args, {"NOTIFY_SOCKET=" + notify.name()}, -1, 0, log_);
  EXPECT_NE(notify.next(10000).find("READY=1"), std::string::npos);
  EXPECT_EQ(terminate(), 0);
}

TEST_F(EpkdSystemd, SocketActivationServesOnThePassedSocketAndLeavesItsFile) {
  std::string sock = (dir_ / "activated.sock").string();
  int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(lfd, 16), 0);
  FakeNotifySocket notify((dir_ / "notify").string());
  // No --socket: the path comes with the fd.
  pid_ = spawn_epkd(kServe, {"NOTIFY_SOCKET=" + notify.name()}, lfd, 1, log_);
  ASSERT_NE(notify.next(10000).find("READY=1"), std::string::npos);
  for (int i = 0; i < 2; ++i) {  // connections queued on systemd's socket are served
    auto c = Client::connect(sock, 5000);
    ASSERT_TRUE(c) << c.error().to_string();
    auto t = c->acquire("m", "t0", shm::Layout::kDenseBF16);
    ASSERT_TRUE(t) << t.error().to_string();
    EXPECT_EQ(t->bytes, 16u * 16 * 2);
    EXPECT_TRUE(c->release(t->handle));
  }
  EXPECT_EQ(terminate(), 0);
  EXPECT_TRUE(fs::exists(sock));  // systemd's file: RemoveOnStop= is systemd's business
  ::close(lfd);
  EXPECT_EQ(log_text().find("LISTEN"), std::string::npos);
}

TEST_F(EpkdSystemd, ActivationWithTwoSocketsIsRefused) {
  int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  pid_ = spawn_epkd(kServe, {}, lfd, 2, log_);
  EXPECT_EQ(exit_code(), 1);
  ::close(lfd);
  EXPECT_NE(log_text().find("LISTEN_FDS='2'"), std::string::npos) << log_text();
}

TEST_F(EpkdSystemd, ActivationWithANonListeningFdIsRefused) {
  int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);  // never listen()ed
  pid_ = spawn_epkd(kServe, {}, lfd, 1, log_);
  EXPECT_EQ(exit_code(), 1);
  ::close(lfd);
  EXPECT_NE(log_text().find("not a listening stream socket"), std::string::npos) << log_text();
}

TEST_F(EpkdSystemd, ListenVariablesForAnotherProcessAreIgnored) {
  // LISTEN_PID names someone else (left as zeros): epkd must not touch fd 3 and needs its own --socket.
  std::string sock = (dir_ / "own.sock").string();
  std::vector<std::string> args = kServe;
  args.insert(args.end(), {"--socket", sock});
  std::vector<std::string> env = {"LISTEN_FDS=1"};
  pid_ = spawn_epkd(args, env, -1, 0, log_);
  auto deadline = test_harness::Clock::now() + std::chrono::seconds(10);
  bool connected = false;
  while (!connected && test_harness::Clock::now() < deadline) {
    connected = static_cast<bool>(Client::connect(sock, 1000));
    if (!connected) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(connected) << log_text();
  EXPECT_EQ(terminate(), 0);
}

TEST_F(EpkdSystemd, ListenVariablesForAnotherProcessAndNoSocketIsAClearError) {
  pid_ = spawn_epkd(kServe, {"LISTEN_FDS=1"}, -1, 0, log_);  // LISTEN_PID left as a stranger's
  EXPECT_EQ(exit_code(), 1);
  EXPECT_NE(log_text().find("LISTEN_PID is not this process"), std::string::npos) << log_text();
}

TEST_F(EpkdSystemd, ReloadSendsReloadingThenReadyWithTheNewModelOpen) {
  FakeNotifySocket notify((dir_ / "notify").string());
  std::string sock = (dir_ / "epkd.sock").string();
  std::string cfg = (dir_ / "epkd.toml").string();
  std::ofstream(cfg) << "socket = \"" << sock << "\"\nbudget_mb = 1\ncpu = true\n"
                     << "[[synthetic]]\nname = \"m\"\nspec = \"t0:8x8\"\n";
  std::string epk_path = (dir_ / "late.epk").string();
  {
    auto w = container::Writer::create(epk_path, {});
    ASSERT_TRUE(w);
    std::vector<std::uint8_t> bytes(6 * 2, 0x3F);
    ASSERT_TRUE(w->add_tensor({"w", {2, 3}, DType::kBF16, container::Encoding::kRaw, "{}"}, {{"data", bytes}}));
    ASSERT_TRUE(w->finish());
  }
  pid_ = spawn_epkd({"--config", cfg}, {"NOTIFY_SOCKET=" + notify.name()}, -1, 0, log_);
  ASSERT_NE(notify.next(10000).find("READY=1"), std::string::npos);
  std::ofstream(cfg, std::ios::app) << "[[model]]\nname = \"late\"\npath = \"" << epk_path << "\"\n"
                                    << "[[model]]\nname = \"broken\"\npath = \"" << (dir_ / "none.epk").string()
                                    << "\"\n";
  ::kill(pid_, SIGHUP);
  EXPECT_NE(notify.next(5000).find("RELOADING=1"), std::string::npos);
  std::string ready = notify.next(5000);
  EXPECT_NE(ready.find("READY=1"), std::string::npos) << ready;
  EXPECT_NE(ready.find("serving 2 model(s)"), std::string::npos) << ready;  // the broken one is refused, logged
  auto c = Client::connect(sock, 5000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto t = c->acquire("late", "w", shm::Layout::kDenseF32);  // open by the time READY=1 came
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->bytes, 24u);
  EXPECT_TRUE(c->release(t->handle));
  c->disconnect();
  EXPECT_EQ(terminate(), 0);
  EXPECT_NE(log_text().find("none.epk"), std::string::npos);
}


TEST_F(EpkdSystemd, AReloadWithAnUnknownKeyIsRefusedAndTheConfigInForceKeepsServing) {
  FakeNotifySocket notify((dir_ / "notify").string());
  std::string sock = (dir_ / "epkd.sock").string();
  std::string cfg = (dir_ / "epkd.toml").string();
  const std::string head = "socket = \"" + sock + "\"\nbudget_mb = 1\ncpu = true\n";
  const std::string good = head + "[[synthetic]]\nname = \"m\"\nspec = \"t0:8x8\"\n";
  std::ofstream(cfg) << good;
  pid_ = spawn_epkd({"--config", cfg}, {"NOTIFY_SOCKET=" + notify.name()}, -1, 0, log_);
  ASSERT_NE(notify.next(10000).find("READY=1"), std::string::npos);
  auto c = Client::connect(sock, 5000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto held = c->acquire("m", "t0", shm::Layout::kStored);  // a lease held across both reloads
  ASSERT_TRUE(held) << held.error().to_string();
  // Line 4 has the typo; the new model listed after it must not be opened either.
  std::ofstream(cfg) << head << "budgte_mb = 4\n" << good.substr(head.size())
                     << "[[synthetic]]\nname = \"n\"\nspec = \"t1:4x4\"\n";
  ::kill(pid_, SIGHUP);
  EXPECT_NE(notify.next(5000).find("RELOADING=1"), std::string::npos);
  std::string ready = notify.next(5000);
  EXPECT_NE(ready.find("READY=1"), std::string::npos) << ready;
  EXPECT_NE(ready.find("serving 1 model(s); reload refused: " + cfg + ":4: unknown key 'budgte_mb'"),
            std::string::npos)
      << ready;
  EXPECT_NE(log_text().find(cfg + ":4: unknown key 'budgte_mb' (did you mean 'budget_mb'?)"), std::string::npos)
      << log_text();
  auto missing = c->acquire("n", "t1", shm::Layout::kStored);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound) << missing.error().to_string();
  auto again = c->acquire("m", "t0", shm::Layout::kStored);  // still served, still the same slot
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->data, held->data);
  EXPECT_TRUE(c->release(again->handle));
  // Fixed: the next reload opens the new model.
  std::ofstream(cfg) << good << "[[synthetic]]\nname = \"n\"\nspec = \"t1:4x4\"\n";
  ::kill(pid_, SIGHUP);
  EXPECT_NE(notify.next(5000).find("RELOADING=1"), std::string::npos);
  ready = notify.next(5000);
  EXPECT_NE(ready.find("serving 2 model(s)"), std::string::npos) << ready;
  EXPECT_EQ(ready.find("refused"), std::string::npos) << ready;
  auto added = c->acquire("n", "t1", shm::Layout::kStored);
  ASSERT_TRUE(added) << added.error().to_string();
  EXPECT_TRUE(c->release(added->handle));
  EXPECT_TRUE(c->release(held->handle));
  c->disconnect();
  EXPECT_EQ(terminate(), 0);
}

TEST_F(EpkdSystemd, AnUnknownKeyIsRefusedAtStartAndByCheckConfig) {
  std::string cfg = (dir_ / "epkd.toml").string();
  std::ofstream(cfg) << "socket = \"" << (dir_ / "epkd.sock").string() << "\"\nbudget_mb = 1\n\n[[synthetic]]\n"
                     << "name = \"m\"\nspce = \"t0:8x8\"\n";
  pid_ = spawn_epkd({"--config", cfg}, {}, -1, 0, log_);
  EXPECT_EQ(exit_code(), 2);
  const std::string expected = cfg + ":6: unknown key 'spce' in [[synthetic]] (did you mean 'spec'?)";
  EXPECT_NE(log_text().find(expected), std::string::npos) << log_text();
  // --check-config: the same message and exit 1; nothing listens.
  std::string out = (dir_ / "check.out").string();
  auto check = [&](const std::string& file) {
    test_harness::Child ch = test_harness::spawn({EPKD_PATH, "--check-config", file}, true, log_);
    std::string line = test_harness::read_line(ch.out, 5000);
    ::close(ch.out);
    return std::make_pair(wait_exit(ch.pid, 5000), line);
  };
  auto [rc, line] = check(cfg);
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(line, "");
  EXPECT_NE(log_text().rfind(expected), log_text().find(expected)) << log_text();  // printed a second time
  EXPECT_FALSE(fs::exists(dir_ / "epkd.sock"));
  std::ofstream(cfg) << "socket = \"/run/x.sock\"\nbudget_mb = 1\n[[synthetic]]\nname = \"m\"\nspec = \"t0:8x8\"\n";
  std::tie(rc, line) = check(cfg);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(line, cfg + ": ok: 0 model(s), 1 synthetic, budget 1 MiB per pool, socket /run/x.sock");
  std::tie(rc, line) = check(std::string(EPK_SOURCE_DIR) + "/systemd/epkd.toml");  // the shipped file
  EXPECT_EQ(rc, 0) << log_text();
  EXPECT_NE(line.find(": ok: 2 model(s)"), std::string::npos) << line;
}


TEST_F(EpkdSystemd, WatchdogPingsAtHalfItsTimeoutWithTheOccupancyInStatus) {
  FakeNotifySocket notify((dir_ / "notify").string());
  std::string sock = (dir_ / "epkd.sock").string();
  std::vector<std::string> args = kServe;
  args.insert(args.end(), {"--socket", sock});
  pid_ = spawn_epkd(args, {"NOTIFY_SOCKET=" + notify.name(), "WATCHDOG_USEC=200000"}, -1, 0, log_);
  ASSERT_NE(notify.next(10000).find("READY=1"), std::string::npos);
  auto c = Client::connect(sock, 5000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto t = c->acquire("m", "t0", shm::Layout::kStored);  // 16x16 fp32, held: 1 KiB used and pinned
  ASSERT_TRUE(t) << t.error().to_string();
  // Every 100 ms; over a second at least 5 even on a loaded machine, and never more often than asked.
  int pings = 0;
  std::string last;
  const auto end = test_harness::Clock::now() + std::chrono::seconds(1);
  while (test_harness::Clock::now() < end) {
    std::string d = notify.next(50);
    if (d.find("WATCHDOG=1") != std::string::npos) {
      ++pings;
      last = d;
    }
  }
  EXPECT_GE(pings, 5);
  EXPECT_LE(pings, 11);
  EXPECT_NE(last.find("STATUS=serving 1 model(s), 1 client(s); pool 0 host: 1.0 KiB of 1.0 MiB (0.1%), 1.0 KiB pinned, "
                      "1 slot(s), 0 hit(s), 1 miss(es)"),
            std::string::npos)
      << last;
  EXPECT_TRUE(c->release(t->handle));
  c->disconnect();
  ::kill(pid_, SIGTERM);
  bool stopping = false;
  for (int i = 0; i < 100 && !stopping; ++i) stopping = notify.next(100).find("STOPPING=1") != std::string::npos;
  EXPECT_TRUE(stopping);
  EXPECT_EQ(exit_code(), 0);
}

TEST_F(EpkdSystemd, AWatchdogMeantForAnotherProcessIsNotPinged) {
  FakeNotifySocket notify((dir_ / "notify").string());
  std::vector<std::string> args = kServe;
  args.insert(args.end(), {"--socket", (dir_ / "epkd.sock").string()});
  pid_ = spawn_epkd(args, {"NOTIFY_SOCKET=" + notify.name(), "WATCHDOG_USEC=200000", "WATCHDOG_PID=1"}, -1, 0, log_);
  ASSERT_NE(notify.next(10000).find("READY=1"), std::string::npos);
  EXPECT_EQ(notify.next(700), "");  // no WATCHDOG=1, and STATUS= only every 5 s
  EXPECT_EQ(terminate(), 0);
}

// A program on PATH, or "" when it is not installed.
std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t pos = 0; pos <= dirs.size();) {
    std::size_t colon = std::min(dirs.find(':', pos), dirs.size());
    fs::path p = fs::path(dirs.substr(pos, colon - pos)) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
    pos = colon + 1;
  }
  return "";
}

// Runs a shell command line; its exit code and its stdout and stderr together.
std::pair<int, std::string> run_shell(const std::string& cmd) {
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = ::pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// systemd-analyze verify reads the units as systemd would (directives, values, dependencies, that each command
// exists). The units name their installed paths (/usr/local/bin/epkd, the MPS control binary): copies pointing at
// the built epkd and /bin/true stand in, every other line as shipped. It exits 0 after mere warnings, so any output
// fails the test too.
TEST_F(EpkdSystemd, UnitFilesPassSystemdAnalyzeVerify) {
  const std::string analyze = find_program("systemd-analyze");
  if (analyze.empty()) GTEST_SKIP() << "systemd-analyze is not installed (Debian: apt-get install systemd)";
  const fs::path units = dir_ / "units";
  fs::create_directories(units);
  std::vector<std::string> files;
  for (const char* name : {"epkd.socket", "epkd.service", "nvidia-mps.service"}) {
    std::ifstream in(std::string(EPK_SOURCE_DIR) + "/systemd/" + name);
    ASSERT_TRUE(in) << name;
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (auto [from, to] : {std::pair<std::string, std::string>{"/usr/local/bin/epkd", EPKD_PATH},
                            {"/usr/bin/nvidia-cuda-mps-control", "/bin/true"}}) {
      for (std::size_t p; (p = text.find(from)) != std::string::npos;) text.replace(p, from.size(), to);
    }
    files.push_back((units / name).string());
    std::ofstream(files.back()) << text;
  }
  std::string cmd = analyze + " verify";
  for (const auto& f : files) cmd += " '" + f + "'";
  auto [rc, out] = run_shell(cmd);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "");
  // The check itself catches a bad directive value (a test that cannot fail proves nothing).
  std::ofstream(files[1], std::ios::app) << "[Service]\nWatchdogSec=thirty\n";
  std::tie(rc, out) = run_shell(cmd);
  EXPECT_NE(out.find("thirty"), std::string::npos) << out;
}

// Socket activation by systemd's own tool (Debian's systemd package): systemd-socket-activate listens, and on the
// first connection execs the command with the socket as fd 3. A gate (a FIFO the command reads before it execs epkd)
// holds epkd back while clients connect: they queue on the socket before any epkd exists and are served once it runs.
TEST_F(EpkdSystemd, SystemdSocketActivateQueuesClientsUntilEpkdStarts) {
  const std::string activate = find_program("systemd-socket-activate");
  if (activate.empty()) GTEST_SKIP() << "systemd-socket-activate is not installed (Debian: apt-get install systemd)";
  FakeNotifySocket notify((dir_ / "notify").string());
  const std::string sock = (dir_ / "activated.sock").string();
  const std::string gate = (dir_ / "gate").string();
  ASSERT_EQ(::mkfifo(gate.c_str(), 0600), 0);
  std::string exec_epkd = "read go < '" + gate + "' && exec '" + std::string(EPKD_PATH) + "'";
  for (const auto& a : kServe) exec_epkd += " '" + a + "'";
  test_harness::Child ch = test_harness::spawn(
      {activate, "-l", sock, "-E", "NOTIFY_SOCKET=" + notify.name(), "/bin/sh", "-c", exec_epkd}, false, log_);
  pid_ = ch.pid;
  auto deadline = test_harness::Clock::now() + std::chrono::seconds(10);
  while (!fs::exists(sock) && test_harness::Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(sock)) << log_text();
  auto exe = [&] {
    std::error_code ec;
    return fs::read_symlink("/proc/" + std::to_string(pid_) + "/exe", ec).string();
  };
  const std::string epkd_exe = fs::canonical(EPKD_PATH).string();
  EXPECT_NE(exe(), epkd_exe);
  constexpr int kClients = 3;
  std::atomic<int> served{0}, done{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      auto c = Client::connect(sock, 20000);
      if (c) {
        auto t = c->acquire("m", "t0", shm::Layout::kDenseBF16);
        if (t && t->bytes == 16u * 16 * 2 && c->release(t->handle)) ++served;
      }
      ++done;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(done.load(), 0);     // connected and waiting: nobody accepts yet
  EXPECT_NE(exe(), epkd_exe);    // and epkd does not exist
  EXPECT_EQ(notify.next(0), "");  // nor has anything reported ready
  {
    std::ofstream(gate) << "go\n";  // the command execs epkd, which takes fd 3 from systemd-socket-activate
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(served.load(), kClients) << log_text();
  EXPECT_EQ(exe(), epkd_exe);  // the activated process became epkd: LISTEN_PID named it
  EXPECT_NE(notify.next(5000).find("READY=1"), std::string::npos);
  EXPECT_EQ(terminate(), 0);
  EXPECT_NE(log_text().find("listening on the socket systemd passed"), std::string::npos) << log_text();
}

}  // namespace
}  // namespace epk
