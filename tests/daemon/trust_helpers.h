// Helpers of the trust tests (epkd_trust_test.cc, epkd_fair_share_test.cc): clients of other uids (needs root),
// config files whose socket any uid may reach, and a fetch of one tensor's bytes.
#pragma once

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/daemon/epkd_harness.h"

namespace epk::trust_test {

using namespace epk::test_harness;  // NOLINT

inline constexpr uid_t kNobody = 65534;

inline std::vector<std::uint8_t> fetch(Client& c, const std::string& model, const std::string& tensor) {
  auto t = c.acquire(model, tensor, shm::Layout::kDenseF32);
  EXPECT_TRUE(t) << t.error().to_string();
  if (!t) return {};
  const auto* p = static_cast<const std::uint8_t*>(t->data);
  std::vector<std::uint8_t> bytes(p, p + t->bytes);
  EXPECT_TRUE(c.release(t->handle));
  return bytes;
}

// The exit code of `fn` run in a child process under uid/gid `id` (fn returns 0 for what the test expects).
inline int run_as(uid_t id, const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(id) != 0 || ::setuid(id) != 0) ::_exit(90);
    ::_exit(fn());
  }
  return wait_exit(pid, 10000);
}

// A config file in a directory of its own, removed with this object: socket mode 0666, so that the kernel lets any
// uid connect and epkd's own rules decide.
class ConfigFile {
 public:
  explicit ConfigFile(const std::string& body) {
    char tmpl[] = "/tmp/epkdtrust.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::chmod(dir_.c_str(), 0755);
    path_ = dir_ + "/epkd.toml";
    std::ofstream(path_) << "socket_mode = \"0666\"\n" << body;
  }
  ConfigFile(const ConfigFile&) = delete;
  ConfigFile& operator=(const ConfigFile&) = delete;
  ~ConfigFile() { std::filesystem::remove_all(dir_); }
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, path_;
};

// The harness's socket directory is private (0700): let other uids reach d's socket, whose own mode then decides.
// The socket's path.
inline std::string open_socket_dir(const Epkd& d) {
  ::chmod(std::filesystem::path(d.socket()).parent_path().c_str(), 0755);
  return d.socket();
}

// run_as(id, ...) with a client of `socket` connected under that uid: 1 when it cannot connect, else what fn returns.
inline int run_as_client(uid_t id, const std::string& socket, const std::function<int(Client&)>& fn) {
  return run_as(id, [&] {
    auto c = Client::connect(socket, 5000);
    return c ? fn(*c) : 1;
  });
}

// A process under uid `id` that runs `fn`, an attacker present while the test goes on: fn calls hold(report) while
// its sessions and pins live, which sends the report line and waits for release(); fn's result is the exit code.
class HeldChild {
 public:
  using Hold = std::function<void(const std::string&)>;
  HeldChild(uid_t id, const std::function<int(const Hold&)>& fn) {
    if (::pipe(ready_) != 0 || ::pipe(go_) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(id) != 0 || ::setuid(id) != 0) ::_exit(90);
      ::_exit(fn([this](const std::string& report) {
        const std::string line = report + "\n";
        if (::write(ready_[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(93);
        char byte;
        (void)!::read(go_[0], &byte, 1);
      }));
    }
    ::close(ready_[1]);
    ::close(go_[0]);
  }
  HeldChild(const HeldChild&) = delete;
  HeldChild& operator=(const HeldChild&) = delete;
  ~HeldChild() {
    if (pid_ > 0) release();
    ::close(ready_[0]);
  }
  std::string report(int timeout_ms) { return read_line(ready_[0], timeout_ms); }
  // Lets it exit (its sessions close); its exit code.
  int release() {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // it ended early: a write to its pipe would raise SIGPIPE here
      ::close(go_[1]);
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    (void)!::write(go_[1], "x", 1);
    ::close(go_[1]);
    const int rc = wait_exit(pid_, 10000);
    pid_ = -1;
    return rc;
  }

 private:
  int ready_[2] = {-1, -1}, go_[2] = {-1, -1};
  pid_t pid_ = -1;
};

}  // namespace epk::trust_test
