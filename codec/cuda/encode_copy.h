// Host <-> device copies of pageable memory (a mapped safetensors file, std::vector) at pinned-memory speed: the
// bytes go through two pinned staging slots, each chunk copied by several host threads while the other slot's DMA
// runs. A pageable cudaMemcpy measured 6.4 GB/s on the H200 host (docs/NOTES.md); the device encoder's source
// upload and payload download use this instead. One copier per host thread (its slots are its own).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace epk::cuda {

class StagedCopier {
 public:
  StagedCopier() = default;
  StagedCopier(const StagedCopier&) = delete;
  StagedCopier& operator=(const StagedCopier&) = delete;
  ~StagedCopier();

  // Host bytes to device memory on stream; returns once the last chunk has landed.
  cudaError_t to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream);
  // Device bytes to host memory on stream; returns once every byte is in dst.
  cudaError_t to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream);

 private:
  cudaError_t init();
  void* slot_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
};

// A grow-only pinned host allocation, for the encoder's small per-step transfers.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  cudaError_t reserve(std::size_t bytes);
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace epk::cuda
