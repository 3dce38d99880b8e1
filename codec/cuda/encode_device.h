// What the device encoder's parts (encode_steps, encode_source, encode_fields, encode_coder) share: grow-only device
// and pinned host allocations, the CUDA error they return (naming the step that met it) and the steps' timer.
// Host-only.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>

#include "codec/common/result.h"

namespace epk::cuda {

inline Error encoder_cuda_error(const char* what, cudaError_t e) {
  return make_error(ErrorCode::kCuda, std::string("device encoder: ") + what + ": " + cudaGetErrorString(e));
}

// Returns encoder_cuda_error(what, e) from the enclosing function when expr fails.
#define EPK_ENC_CUDA_TRY(what, expr)                      \
  do {                                                    \
    if (const cudaError_t e_ = (expr); e_ != cudaSuccess) \
      return ::epk::cuda::encoder_cuda_error(what, e_);   \
  } while (0)

// A grow-only allocation: reserve() keeps the bytes when they suffice, else frees them and allocates anew (the
// contents are not kept), at least kMinBytes.
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
    if (bytes <= size_) return cudaSuccess;
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

// Adds the scope's wall time in seconds to *sink (the encoder's step times, for benches).
class ScopedTimer {
 public:
  explicit ScopedTimer(double* sink) : sink_(sink), t0_(std::chrono::steady_clock::now()) {}
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  ~ScopedTimer() { *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  double* sink_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace epk::cuda
