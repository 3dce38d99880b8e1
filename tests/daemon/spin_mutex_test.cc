#include "daemon/cache/spin_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace epk::daemon {
namespace {

TEST(SpinMutex, TryLockFailsWhileHeld) {
  SpinMutex m;
  ASSERT_TRUE(m.try_lock());
  EXPECT_FALSE(m.try_lock());
  m.unlock();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// More threads than this VM has cores, short sections: waiters spin, and some sleep (futex) while the holder is
// descheduled. A plain counter loses increments unless every section excludes every other.
TEST(SpinMutex, ExcludesUnderContention) {
  SpinMutex m;
  std::uint64_t counter = 0;
  constexpr int kThreads = 7, kIters = 20011;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        std::lock_guard<SpinMutex> g(m);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, std::uint64_t{kThreads} * kIters);
}

// A holder that keeps the lock far past the spin: the waiters go to sleep, and the unlock must wake each of them.
TEST(SpinMutex, SleepersAreWokenByUnlock) {
  SpinMutex m;
  m.lock();
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < 3; ++t) {
    waiters.emplace_back([&] {
      std::lock_guard<SpinMutex> g(m);
      done.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(done.load(), 0);
  m.unlock();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(done.load(), 3);
  EXPECT_TRUE(m.try_lock());  // free again, with no sleeper state left behind that would block it
  m.unlock();
}

}  // namespace
}  // namespace epk::daemon
