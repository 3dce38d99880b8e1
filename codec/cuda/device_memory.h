// Grow-only device and pinned host allocations, for code that reuses its buffers from call to call (the device
// encoder's steps) or sizes them once (epk's --device cuda decode). Host-only.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

namespace epk::cuda {

// A grow-only allocation: reserve() keeps the bytes when they suffice, else frees them and allocates anew (the
// contents are not kept), at least kMinBytes, so that a reserved buffer is never null even for 0 bytes.
template <cudaError_t (*Alloc)(void**, std::size_t), cudaError_t (*Free)(void*), std::size_t kMinBytes>
class GrowOnlyBuffer {
 public:
  GrowOnlyBuffer() = default;
  GrowOnlyBuffer(const GrowOnlyBuffer&) = delete;
  GrowOnlyBuffer& operator=(const GrowOnlyBuffer&) = delete;
  ~GrowOnlyBuffer() {
    if (p_) Free(p_);
  }
  cudaError_t reserve(std::size_t bytes) {
    if (p_ && bytes <= size_) return cudaSuccess;
    if (p_) Free(p_);
    p_ = nullptr;
    size_ = 0;
    const std::size_t want = std::max(bytes, kMinBytes);
    const cudaError_t e = Alloc(&p_, want);
    if (e == cudaSuccess) size_ = want;
    return e;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {
inline cudaError_t device_alloc(void** p, std::size_t n) { return cudaMalloc(p, n); }
inline cudaError_t pinned_alloc(void** p, std::size_t n) { return cudaMallocHost(p, n); }
inline cudaError_t device_free(void* p) { return cudaFree(p); }
inline cudaError_t pinned_free(void* p) { return cudaFreeHost(p); }
}  // namespace detail

// Device memory, and pinned host memory for the steps' small transfers.
using DeviceBuffer = GrowOnlyBuffer<&detail::device_alloc, &detail::device_free, 256>;
using PinnedBuffer = GrowOnlyBuffer<&detail::pinned_alloc, &detail::pinned_free, 4096>;

}  // namespace epk::cuda
