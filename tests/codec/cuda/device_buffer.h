// Move-only owner of a cudaMalloc allocation for the GPU decoder tests and bench.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace epk::testing {

#define EPK_CUDA_CHECK(expr)                                                                     \
  do {                                                                                           \
    cudaError_t epk_cuda_err_ = (expr);                                                          \
    if (epk_cuda_err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                          \
                   cudaGetErrorString(epk_cuda_err_));                                           \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) EPK_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  void reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <class T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

  static DeviceBuffer from_host(const void* src, std::size_t bytes, std::size_t alloc_bytes = 0) {
    DeviceBuffer b(alloc_bytes > bytes ? alloc_bytes : bytes);
    if (b.bytes_ > bytes) EPK_CUDA_CHECK(cudaMemset(b.get<std::uint8_t>() + bytes, 0, b.bytes_ - bytes));
    if (bytes > 0) EPK_CUDA_CHECK(cudaMemcpy(b.ptr_, src, bytes, cudaMemcpyHostToDevice));
    return b;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace epk::testing
