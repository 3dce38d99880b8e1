#include "daemon/cache/lane_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace epk::daemon {
namespace {

// Readers (one per slot) and writers at once, more threads than this VM has cores. Writers bump a plain counter and
// check that no reader is inside; readers check that no writer is inside. Either seeing the other is a failure.
TEST(LaneLock, WritersExcludeReadersAndEachOther) {
  constexpr int kReaders = 5, kWriters = 3, kIters = 4001;
  LaneLock lock(kReaders);
  std::atomic<int> readers_in{0}, writers_in{0}, bad{0};
  std::uint64_t written = 0;  // guarded by the exclusive side
  std::vector<std::thread> threads;
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < kIters; ++i) {
        SharedLaneGuard g(lock, static_cast<std::size_t>(r));
        readers_in.fetch_add(1);
        if (writers_in.load() != 0) bad.fetch_add(1);
        readers_in.fetch_sub(1);
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        std::lock_guard<LaneLock> g(lock);
        if (writers_in.fetch_add(1) != 0 || readers_in.load() != 0) bad.fetch_add(1);
        ++written;
        writers_in.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(written, std::uint64_t{kWriters} * kIters);
}

// Two readers inside at the same time: the shared side does not exclude itself.
TEST(LaneLock, ReadersShare) {
  LaneLock lock(2);
  lock.lock_shared(0);
  std::atomic<bool> second_in{false};
  std::thread other([&] {
    SharedLaneGuard g(lock, 1);
    second_in = true;
  });
  other.join();  // would hang if the second reader waited for the first
  EXPECT_TRUE(second_in.load());
  lock.unlock_shared(0);
}

// A writer waits for a reader inside, and gets in once it leaves.
TEST(LaneLock, WriterWaitsForAReaderToLeave) {
  LaneLock lock(1);
  lock.lock_shared(0);
  std::atomic<bool> writer_in{false};
  std::thread writer([&] {
    std::lock_guard<LaneLock> g(lock);
    writer_in = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(writer_in.load());
  lock.unlock_shared(0);
  writer.join();
  EXPECT_TRUE(writer_in.load());
}

}  // namespace
}  // namespace epk::daemon
