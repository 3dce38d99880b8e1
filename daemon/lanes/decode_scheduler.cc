#include "daemon/lanes/decode_scheduler.h"

#include <chrono>

namespace epk::daemon {

DecodeScheduler::DecodeScheduler(unsigned threads, std::uint32_t spin_us) : spin_us_(spin_us) {
  if (threads == 0) threads = 1;
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { worker(); });
}

DecodeScheduler::~DecodeScheduler() { stop(); }

DecodeScheduler::JobPtr DecodeScheduler::submit(std::function<void()> fn, Priority priority) {
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return job;  // never runs; callers drain before stopping
    (priority == Priority::kAcquire ? acquire_q_ : prefetch_q_).push_back(job);
    ++pending_;
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_one();
  return job;
}

void DecodeScheduler::promote(const JobPtr& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || job->claimed.load()) return;
    acquire_q_.push_back(job);  // the stale prefetch-queue entry is skipped when popped (claimed)
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_one();
}

void DecodeScheduler::spin_for_work() const {
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
  while (queued_.load(std::memory_order_acquire) == 0 && !stop_flag_.load(std::memory_order_relaxed) &&
         std::chrono::steady_clock::now() < end) {
  }
}

void DecodeScheduler::worker() {
  bool ran = false;
  for (;;) {
    if (ran && spin_us_ != 0) spin_for_work();  // only right after a job: an idle worker sleeps
    JobPtr job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !acquire_q_.empty() || !prefetch_q_.empty(); });
      if (stopping_) return;
      auto& q = !acquire_q_.empty() ? acquire_q_ : prefetch_q_;
      job = std::move(q.front());
      q.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
      ran = false;
      if (job->claimed.exchange(true)) continue;  // the other copy of a promoted job already ran
    }
    ran = true;
    job->fn();
    job->fn = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    idle_cv_.notify_all();
  }
}

void DecodeScheduler::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return pending_ == 0 || stopping_; });
}

void DecodeScheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    stop_flag_.store(true);
    acquire_q_.clear();
    prefetch_q_.clear();
    queued_.store(0);
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

}  // namespace epk::daemon
