#include "codec/container/write_pool.h"

#include <utility>

namespace epk::container {

WritePool::WritePool(Writer& writer, int threads, std::size_t max_pending)
    : writer_(writer), max_pending_(max_pending < 1 ? 1 : max_pending) {
  for (int i = 0; i < (threads < 1 ? 1 : threads); ++i) threads_.emplace_back([this] { work(); });
}

WritePool::~WritePool() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WritePool::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ with nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    const bool failed = !error_;  // after a failure the file is abandoned: the rest is not written
    lock.unlock();
    cv_.notify_all();  // room in the queue
    Status st = failed ? Status{} : writer_.fill_tensor(job.place, job.buffers);
    job = Job{};  // releases `keep` before the next job
    lock.lock();
    if (!st && error_) error_ = std::move(st);  // the first failure is kept
    --busy_;
    cv_.notify_all();
  }
}

Status WritePool::add(const TensorSpec& spec, std::vector<BufferData> buffers, std::shared_ptr<const void> keep) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) return error_;
  }
  EPK_TRY_ASSIGN(Writer::Reservation place, writer_.reserve_tensor(spec, buffer_shapes(buffers)));
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.size() < max_pending_; });
  queue_.push_back(Job{place, std::move(buffers), std::move(keep)});
  lock.unlock();
  cv_.notify_all();
  return {};
}

void WritePool::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
}

Status WritePool::finish() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) return error_;
  }
  return writer_.finish();
}

}  // namespace epk::container
