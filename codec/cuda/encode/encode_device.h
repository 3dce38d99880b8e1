// What the device encoder's parts (encode_steps, encode_source, encode_fields, encode_coder) share besides their
// buffers (device_memory.h): the CUDA error they return, naming the step that met it, and the steps' timer.
// Host-only.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "codec/common/result.h"
#include "codec/cuda/device_memory.h"

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
