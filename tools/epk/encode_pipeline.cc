#include "tools/epk/encode_pipeline.h"

#include <chrono>
#include <utility>

namespace epk::cli {

EncodePipeline::EncodePipeline(std::vector<std::unique_ptr<rate::TensorEncoder>> encoders, std::vector<Job> jobs)
    : encoders_(std::move(encoders)), jobs_(std::move(jobs)), done_(jobs_.size()) {
  for (std::size_t w = 0; w < encoders_.size(); ++w) threads_.emplace_back([this, w] { work(w); });
}

EncodePipeline::~EncodePipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void EncodePipeline::work(std::size_t w) {
  const std::size_t k = encoders_.size();
  rate::TensorEncoder& enc = *encoders_[w];
  for (std::size_t j = w; j < jobs_.size(); j += k) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || j < taken_ + 2 * k; });
      if (stop_) return;
    }
    enc.prefetch_next(j + k < jobs_.size() ? jobs_[j + k].weights : std::span<const std::byte>());
    const Job& job = jobs_[j];
    const auto t0 = std::chrono::steady_clock::now();
    auto packed = rate::pack_tensor(enc, job.weights, job.rows, job.cols, job.dtype, job.options, job.policy,
                                    job.info, job.name);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_[j] = Done{std::move(packed), s};
    }
    cv_.notify_all();
  }
}

EncodePipeline::Done EncodePipeline::take(std::size_t j) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_[j].has_value(); });
  Done out = std::move(*done_[j]);
  done_[j].reset();
  taken_ = j + 1;
  lock.unlock();
  cv_.notify_all();
  return out;
}

}  // namespace epk::cli
