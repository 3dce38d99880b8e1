// epk compress --device cuda: tensors packed ahead of the writer by several encoders, each on its own host thread,
// so that one tensor's host work (its upload, payload download, tables, the stored-rate check) overlaps other
// tensors' device work. Job j goes to encoder j % K and hands that encoder job j + K as its next tensor (the
// prefetch hint); results are taken in job order, and at most 2K jobs past the one being taken are in flight or
// waiting, which bounds host memory. The streams are the encoders' own: the file is the same as with one encoder.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "codec/rate/choose.h"

namespace epk::cli {

class EncodePipeline {
 public:
  struct Job {
    std::span<const std::byte> weights;
    std::uint32_t rows = 0, cols = 0;
    DType dtype = DType::kF32;
    rate::EncodeOptions options;
    rate::ChoicePolicy policy;
    rans::EncodingInfo info;
    std::string name;
  };
  struct Done {
    Result<rate::Packed> packed;
    double seconds = 0;  // the pack's own wall time on its thread
  };

  EncodePipeline(std::vector<std::unique_ptr<rate::TensorEncoder>> encoders, std::vector<Job> jobs);
  ~EncodePipeline();  // stops the workers (jobs not taken are dropped) and joins them
  EncodePipeline(const EncodePipeline&) = delete;
  EncodePipeline& operator=(const EncodePipeline&) = delete;

  // Waits for job j (taken in order: j is the job after the last one taken) and hands over its result.
  Done take(std::size_t j);

 private:
  void work(std::size_t w);

  std::vector<std::unique_ptr<rate::TensorEncoder>> encoders_;
  std::vector<Job> jobs_;
  std::vector<std::optional<Done>> done_;
  std::size_t taken_ = 0;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
};

}  // namespace epk::cli
