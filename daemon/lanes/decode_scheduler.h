// The CPU decode scheduler: a fixed thread pool with two queues. Acquire jobs always run before prefetch jobs; a
// queued prefetch job that an acquire then needs is promoted (run from the acquire queue, once). On GPU machines a
// per-device stream scheduler takes this role behind the same submit/promote calls.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace epk::daemon {

enum class Priority : std::uint8_t { kAcquire, kPrefetch };

class DecodeScheduler {
 public:
  struct Job {
    std::function<void()> fn;
    std::atomic<bool> claimed{false};  // set by the worker that runs it (a promoted job sits in both queues)
  };
  using JobPtr = std::shared_ptr<Job>;

  // `spin_us`: after each job a worker polls for the next one this long before it sleeps (the GPU lanes' one worker:
  // a wake-up of a sleeping thread cost ~23 us of an uncached device acquire on the H200). 0: sleep at once.
  explicit DecodeScheduler(unsigned threads, std::uint32_t spin_us = 0);
  ~DecodeScheduler();  // stop() then join
  DecodeScheduler(const DecodeScheduler&) = delete;
  DecodeScheduler& operator=(const DecodeScheduler&) = delete;

  JobPtr submit(std::function<void()> fn, Priority priority);
  // Moves a job still waiting in the prefetch queue ahead of every prefetch job. No effect once it started.
  void promote(const JobPtr& job);
  // Waits until every job submitted so far has run (new submissions during the wait are also waited for).
  void drain();
  // Drops queued jobs that have not started, lets running ones finish and joins the workers. Idempotent.
  void stop();

  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }

 private:
  void worker();
  void spin_for_work() const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<JobPtr> acquire_q_;
  std::deque<JobPtr> prefetch_q_;
  std::size_t pending_ = 0;  // submitted and not yet run (or dropped)
  bool stopping_ = false;
  std::atomic<std::size_t> queued_{0};  // entries in both queues (stale promoted copies included), for the spin
  std::atomic<bool> stop_flag_{false};
  std::uint32_t spin_us_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace epk::daemon
