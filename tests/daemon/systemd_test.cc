#include "daemon/net/systemd.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace epk::daemon {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Sets or clears the watchdog variables for one test and restores a clean environment after it.
class WatchdogEnv : public testing::Test {
 protected:
  void TearDown() override {
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
  }
  static void set(const char* usec, const char* pid) {
    if (usec != nullptr) ::setenv("WATCHDOG_USEC", usec, 1);
    if (pid != nullptr) ::setenv("WATCHDOG_PID", pid, 1);
  }
};

TEST_F(WatchdogEnv, UnsetMeansNoWatchdog) {
  auto w = watchdog_timeout();
  ASSERT_TRUE(w) << w.error().to_string();
  EXPECT_FALSE(w->has_value());
}

TEST_F(WatchdogEnv, ForThisProcessOrAnyone) {
  set("30000000", nullptr);
  auto w = watchdog_timeout();
  ASSERT_TRUE(w && w->has_value());
  EXPECT_EQ(**w, microseconds(30000000));
  set(nullptr, std::to_string(::getpid()).c_str());
  w = watchdog_timeout();
  ASSERT_TRUE(w && w->has_value());
  EXPECT_EQ(**w, microseconds(30000000));
}

TEST_F(WatchdogEnv, ForAnotherProcessIsNotOurs) {
  set("30000000", std::to_string(::getpid() + 1).c_str());
  auto w = watchdog_timeout();
  ASSERT_TRUE(w) << w.error().to_string();
  EXPECT_FALSE(w->has_value());
}

TEST_F(WatchdogEnv, GarbageIsAnErrorNamingTheVariable) {
  for (const char* bad : {"", "0", "-5", "10s", "1e6"}) {
    set(bad, nullptr);
    auto w = watchdog_timeout();
    ASSERT_FALSE(w) << "'" << bad << "'";
    EXPECT_NE(w.error().message.find("WATCHDOG_USEC"), std::string::npos);
  }
  set("1000", "pid1");
  auto w = watchdog_timeout();
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("WATCHDOG_PID"), std::string::npos);
}

TEST(SystemdStatus, PeriodIsHalfTheWatchdogAtMostFiveSeconds) {
  EXPECT_EQ(status_period(std::nullopt), microseconds(kStatusPeriod));
  EXPECT_EQ(status_period(microseconds(30000000)), microseconds(kStatusPeriod));
  EXPECT_EQ(status_period(microseconds(6000000)), microseconds(3000000));
  EXPECT_EQ(status_period(microseconds(200000)), microseconds(100000));
  EXPECT_EQ(status_period(microseconds(1)), milliseconds(1));
}

TEST(SystemdStatus, TextShowsEveryPoolsOccupancy) {
  shm::StatsReply s;
  s.models = 2;
  s.clients = 3;
  EXPECT_EQ(status_text(s), "serving 2 model(s), 3 client(s)");
  shm::PoolStats host;
  host.pool_id = 0;
  host.device = -1;
  host.budget_bytes = 1 << 20;
  host.used_bytes = 1000;
  host.slots = 1;
  host.hits = 7;
  host.misses = 1;
  shm::PoolStats dev;
  dev.pool_id = 1;
  dev.device = 3;
  dev.budget_bytes = 16ull << 30;
  dev.used_bytes = 12ull << 30;
  dev.pinned_bytes = 1536ull << 20;
  dev.slots = 40;
  s.pools = {host, dev};
  EXPECT_EQ(status_text(s),
            "serving 2 model(s), 3 client(s); pool 0 host: 1000 B of 1.0 MiB (0.1%), 0 B pinned, 1 slot(s), 7 hit(s), "
            "1 miss(es); pool 1 device 3: 12.0 GiB of 16.0 GiB (75.0%), 1.5 GiB pinned, 40 slot(s), 0 hit(s), "
            "0 miss(es)");
}

}  // namespace
}  // namespace epk::daemon
