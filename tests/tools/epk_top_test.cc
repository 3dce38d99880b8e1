// `epk top` against the real epkd: on a terminal (a tmux pane: send-keys, capture-pane) it redraws one screen live
// and q quits; on TERM=dumb and into a pipe it prints plain frames.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/daemon/epkd_harness.h"
#include "tests/tools/run_command.h"

namespace {

namespace fs = std::filesystem;
using epk::test::run_command;
using epk::test_harness::Clock;
using epk::test_harness::Epkd;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// A private tmux server (its own socket name and an empty config but for remain-on-exit, so that a pane whose
// program ended stays on screen), killed at the end.
class EpkTop : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "epk_top_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    conf_ = (fs::temp_directory_path() / (name_ + ".conf")).string();
    std::ofstream(conf_) << "set -g remain-on-exit on\n";
    status_ = (fs::temp_directory_path() / (name_ + ".status")).string();
    fs::remove(status_);
  }
  void TearDown() override {
    run_command(tmux("kill-server"));
    fs::remove(conf_);
    fs::remove(status_);
  }
  static bool have_tmux() { return run_command("command -v tmux").status == 0; }
  std::string tmux(const std::string& args) const { return "tmux -L " + name_ + " -f " + quoted(conf_) + " " + args; }
  // Starts `command` in a detached 120x30 session "top".
  void start(const std::string& command) {
    auto r = run_command(
        tmux("new-session -d -s top -x 120 -y 30 " + quoted(command + "; echo $? > " + status_ + ".tmp; mv " + status_ +
                                                             ".tmp " + status_)));
    ASSERT_EQ(r.status, 0) << r.out;
  }
  std::string screen() const { return run_command(tmux("capture-pane -p -t top"), false).out; }
  // The screen once `ok(screen)` holds, waiting up to 10 s (the last screen when it never does).
  template <class F>
  std::string wait_screen(F ok) const {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::string s = screen();
    while (!ok(s) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      s = screen();
    }
    return s;
  }
  // "1 STATUS" once the pane's program has exited, waiting up to 5 s. The status comes from a file the pane's shell
  // writes after the program (start()): tmux can mark a pane dead before it has reaped the program, and then report
  // no status at all.
  std::string wait_exit() const {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    std::string s;
    do {
      std::ifstream in(status_);
      if (std::getline(in, s) && !s.empty()) return "1 " + s;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (Clock::now() < deadline);
    return "still running";
  }
  std::string line_with(const std::string& s, const std::string& what) const {
    const auto p = s.find(what);
    if (p == std::string::npos) return "";
    const auto start = s.rfind('\n', p);
    return s.substr(start == std::string::npos ? 0 : start + 1, s.find('\n', p) - (start == std::string::npos ? 0 : start + 1));
  }

  std::string name_, conf_, status_;
};

const std::vector<std::string> kModel = {"--synthetic", "m=t0:256x256,t1:16x16"};  // t0: 256 KiB of fp32

TEST_F(EpkTop, OnATerminalItRedrawsLiveAndQQuits) {
  if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (apt-get install tmux)";
  Epkd d(kModel, "1");
  ASSERT_TRUE(d.running());
  start(std::string(EPK_TOOL) + " top --socket " + quoted(d.socket()));
  std::string s = wait_screen([](const std::string& x) { return x.find("pool 0 host") != std::string::npos; });
  ASSERT_NE(s.find("pool 0 host"), std::string::npos) << s;
  EXPECT_NE(s.find("(q quits)"), std::string::npos) << s;
  EXPECT_NE(s.find("clients 0"), std::string::npos) << s;
  EXPECT_NE(line_with(s, "pool 0 host").find("[......"), std::string::npos) << s;
  // A client takes a quarter of the pool; the next refreshes show it.
  auto c = epk::client::Client::connect(d.socket(), 5000);
  ASSERT_TRUE(c) << c.error().to_string();
  auto t = c->acquire("m", "t0", epk::shm::Layout::kStored);
  ASSERT_TRUE(t) << t.error().to_string();
  s = wait_screen([](const std::string& x) {
    return x.find(" 25.0%  256.00 KiB / 1.00 MiB") != std::string::npos && x.find("clients 1") != std::string::npos;
  });
  const std::string pool = line_with(s, "pool 0 host");
  EXPECT_NE(pool.find("]  25.0%  256.00 KiB / 1.00 MiB  pinned 256.00 KiB  slots 1"), std::string::npos) << s;
  // A quarter of the bar filled (rounded down), the rest empty.
  const auto open = pool.find('['), close = pool.find(']');
  ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << pool;
  const std::string cells = pool.substr(open + 1, close - open - 1);
  EXPECT_EQ(count(cells, "#"), cells.size() / 4) << pool;
  EXPECT_EQ(count(cells, "#") + count(cells, "."), cells.size()) << pool;
  EXPECT_NE(line_with(s, "m   ").find("256.00 KiB"), std::string::npos) << s;  // the model's cached bytes
  // One screen, redrawn in place: the header appears once.
  EXPECT_EQ(count(s, "epk top: epkd at"), 1u) << s;
  s = wait_screen([](const std::string& x) { return x.find("last 1.") != std::string::npos; });
  EXPECT_NE(s.find("hit rate 0.0% of 1 acquires"), std::string::npos) << s;
  ASSERT_EQ(run_command(tmux("send-keys -t top q")).status, 0);
  EXPECT_EQ(wait_exit(), "1 0");
  // The alternate screen is left: what top drew is gone from the pane.
  EXPECT_EQ(screen().find("pool 0 host"), std::string::npos) << screen();
  EXPECT_TRUE(c->release(t->handle));
}

TEST_F(EpkTop, OnADumbTerminalItPrintsPlainFrames) {
  if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (apt-get install tmux)";
  Epkd d(kModel, "1");
  ASSERT_TRUE(d.running());
  start("TERM=dumb " + std::string(EPK_TOOL) + " top --socket " + quoted(d.socket()));
  // Frames follow one another instead of replacing the screen.
  std::string s = wait_screen([](const std::string& x) { return count(x, "epk top: epkd at") >= 2; });
  EXPECT_GE(count(s, "epk top: epkd at"), 2u) << s;
  EXPECT_NE(s.find("(q quits)"), std::string::npos) << s;  // stdin is the pane's terminal: q still works
  ASSERT_EQ(run_command(tmux("send-keys -t top q")).status, 0);
  EXPECT_EQ(wait_exit(), "1 0");
  EXPECT_NE(screen().find("pool 0 host"), std::string::npos);  // plain text stays on the screen
}

TEST_F(EpkTop, IntoAPipeItPrintsPlainTextAndStopsAfterN) {
  Epkd d(kModel, "1");
  ASSERT_TRUE(d.running());
  auto r = run_command(std::string(EPK_TOOL) + " top --socket " + quoted(d.socket()) + " -n 2 < /dev/null");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "epk top: epkd at"), 2u) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("q quits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pool 0 host      [..........]   0.0%  0 B / 1.00 MiB  pinned 0 B  slots 0"), std::string::npos)
      << r.out;  // 100 columns assumed: a bar of 10 cells
  EXPECT_NE(r.out.find("last 1."), std::string::npos) << r.out;  // the second frame has rates
}

TEST_F(EpkTop, NoDaemonIsAClearError) {
  auto r = run_command(std::string(EPK_TOOL) + " top --socket /nonexistent/epkd.sock -n 1 < /dev/null");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent/epkd.sock"), std::string::npos) << r.out;
}

}  // namespace
