// A test source: deterministic fp32 tensors defined by a spec string, served as stored (fp32) or dense bf16/fp16/fp32.
// Used by tests, benchmarks and `epkd --synthetic` until the .epk reader lands; not a real checkpoint.
//
// Spec: comma-separated tensors, each `[NAME:]ROWSxCOLS[:corrupt]` (or a single length `N` for 1-D). Unnamed tensors
// are called t0, t1, ... in order. `corrupt` makes produce() fail, to exercise the decode-failure path.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "daemon/sources/model_source.h"

namespace epk::daemon {

// The value of element `index` of synthetic tensor number `tensor`: a multiple of 1/1024 in [-2, 2), exact in fp16
// and fp32.
float synthetic_value(std::uint32_t tensor, std::uint64_t index);

// Round-to-nearest-even conversions used by the dense layouts (plain scalar code; the reference for any fast path).
std::uint16_t f32_to_bf16(float v);
std::uint16_t f32_to_f16(float v);

class SyntheticSource final : public ModelSource {
 public:
  // `delay` is added to every produce() to model a slow decoder (lets tests overlap concurrent acquires).
  static Result<std::unique_ptr<SyntheticSource>> create(const std::string& spec, std::chrono::microseconds delay);

  const std::string& origin() const override { return origin_; }
  const std::vector<TensorMeta>& tensors() const override { return tensors_; }
  Result<ServedTensor> served(std::size_t tensor, shm::Layout layout) const override;
  Status produce(std::size_t tensor, shm::Layout layout, std::span<std::uint8_t> dst) const override;

  // How many produce() calls ran (tests check that concurrent acquires decode once).
  std::uint64_t produce_count() const { return produce_count_.load(); }

 private:
  SyntheticSource() = default;

  std::string origin_;
  std::vector<TensorMeta> tensors_;
  std::vector<bool> corrupt_;
  std::chrono::microseconds delay_{0};
  mutable std::atomic<std::uint64_t> produce_count_{0};
};

}  // namespace epk::daemon
