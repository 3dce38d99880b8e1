#include "daemon/lanes/decode_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace epk::daemon {
namespace {

// Blocks the single worker until `open` is set, so jobs queue up behind it in a known state.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> l(mu);
      open = true;
    }
    cv.notify_all();
  }
};

// Jobs that note their number when they run, from any worker thread.
class RunOrder {
 public:
  std::function<void()> record(int v) {
    return [this, v] {
      std::lock_guard<std::mutex> l(mu_);
      order_.push_back(v);
    };
  }
  std::vector<int> order() {
    std::lock_guard<std::mutex> l(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::vector<int> order_;
};

TEST(DecodeScheduler, AcquireJobsRunBeforeQueuedPrefetches) {
  DecodeScheduler s(1);
  Gate gate;
  RunOrder ran;
  s.submit([&] { gate.wait(); }, Priority::kAcquire);
  s.submit(ran.record(1), Priority::kPrefetch);
  s.submit(ran.record(2), Priority::kPrefetch);
  s.submit(ran.record(3), Priority::kAcquire);
  gate.release();
  s.drain();
  EXPECT_EQ(ran.order(), (std::vector<int>{3, 1, 2}));
}

TEST(DecodeScheduler, PromotedJobRunsOnceAndAheadOfPrefetches) {
  DecodeScheduler s(1);
  Gate gate;
  RunOrder ran;
  s.submit([&] { gate.wait(); }, Priority::kAcquire);
  s.submit(ran.record(1), Priority::kPrefetch);
  auto job = s.submit(ran.record(2), Priority::kPrefetch);
  s.promote(job);
  gate.release();
  s.drain();
  EXPECT_EQ(ran.order(), (std::vector<int>{2, 1}));
  s.promote(job);  // after it ran: no effect
  s.drain();
  EXPECT_EQ(ran.order().size(), 2u);
}

TEST(DecodeScheduler, ManyJobsOnManyThreadsAllRun) {
  DecodeScheduler s(4);
  std::atomic<int> n{0};
  for (int i = 0; i < 1000; ++i) s.submit([&] { n.fetch_add(1); }, i % 3 ? Priority::kPrefetch : Priority::kAcquire);
  s.drain();
  EXPECT_EQ(n.load(), 1000);
}

TEST(DecodeScheduler, StopDropsQueuedJobsAndLetsTheRunningOneFinish) {
  DecodeScheduler s(1);
  std::atomic<bool> started{false}, finished{false}, dropped_ran{false};
  s.submit(
      [&] {
        started = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        finished = true;
      },
      Priority::kAcquire);
  s.submit([&] { dropped_ran = true; }, Priority::kPrefetch);
  while (!started) std::this_thread::yield();
  s.stop();
  EXPECT_TRUE(finished);
  EXPECT_FALSE(dropped_ran);
  s.stop();  // idempotent
}

// A worker that polls for work after each job (spin_us) still keeps the priorities, runs every job once and stops
// promptly, also while it is polling.
TEST(DecodeScheduler, ASpinningWorkerKeepsOrderAndStops) {
  DecodeScheduler s(1, 2000);
  Gate gate;
  RunOrder ran;
  s.submit([&] { gate.wait(); }, Priority::kAcquire);
  s.submit(ran.record(1), Priority::kPrefetch);
  s.submit(ran.record(2), Priority::kAcquire);
  gate.release();
  s.drain();
  EXPECT_EQ(ran.order(), (std::vector<int>{2, 1}));
  // Submitted while the worker polls (it ran a job just before): picked up without a wake-up.
  std::atomic<int> n{0};
  for (int i = 0; i < 200; ++i) {
    s.submit([&] { n.fetch_add(1); }, Priority::kAcquire);
    if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  s.drain();
  EXPECT_EQ(n.load(), 200);
  const auto t0 = std::chrono::steady_clock::now();
  s.stop();  // the worker is polling now: it must see the stop, not finish its 2 ms first and then sleep forever
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
}

}  // namespace
}  // namespace epk::daemon
