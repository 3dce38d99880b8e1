// What the device encoder's parts (encode_steps, encode_source, encode_fields, encode_coder) share: a grow-only
// device allocation, the CUDA error they return (naming the step that met it) and the steps' timer. Host-only.
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

// A grow-only device allocation: reserve() keeps the bytes when they suffice, else frees them and allocates anew
// (the contents are not kept).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  cudaError_t reserve(std::size_t bytes) {
    if (bytes <= size_) return cudaSuccess;
    if (p_) cudaFree(p_);
    p_ = nullptr;
    size_ = 0;
    const std::size_t want = std::max<std::size_t>(bytes, 256);
    const cudaError_t e = cudaMalloc(&p_, want);
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
