#include "codec/cuda/device_allocation.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

namespace epk::cuda {
namespace {

Error cuda_error(std::string_view what, const char* call, cudaError_t e) {
  return make_error(ErrorCode::kCuda, std::string(what) + ": " + call + ": " + cudaGetErrorName(e) + " (" +
                                          cudaGetErrorString(e) + ")");
}

}  // namespace

DeviceAllocation& DeviceAllocation::operator=(DeviceAllocation&& o) noexcept {
  if (this == &o) return *this;
  reset();
  address_ = std::exchange(o.address_, DeviceAddress());
  size_ = std::exchange(o.size_, 0);
  device_ = o.device_;
  return *this;
}

Result<DeviceAllocation> DeviceAllocation::create(std::uint64_t bytes, int device, std::string_view what) {
  DeviceAllocation out;
  if (bytes == 0) return out;
  EPK_TRY(set_device(device));
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
    return cuda_error(what, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str(), e);
  }
  out.address_ = DeviceAddress::of(p);
  out.size_ = bytes;
  out.device_ = device;
  return out;
}

void DeviceAllocation::reset() {
  if (!address_) return;
  // Freed on its own device whichever is current here (the caller's current device is kept).
  int current = -1;
  const bool switched = cudaGetDevice(&current) == cudaSuccess && current != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  (void)cudaFree(address_.as<void>());
  if (switched) (void)cudaSetDevice(current);
  address_ = DeviceAddress();
  size_ = 0;
}

PinnedAllocation& PinnedAllocation::operator=(PinnedAllocation&& o) noexcept {
  if (this == &o) return *this;
  reset();
  data_ = std::exchange(o.data_, nullptr);
  size_ = std::exchange(o.size_, 0);
  return *this;
}

Result<PinnedAllocation> PinnedAllocation::create(std::uint64_t bytes, std::string_view what) {
  PinnedAllocation out;
  if (bytes == 0) return out;
  void* p = nullptr;
  if (cudaError_t e = cudaMallocHost(&p, bytes); e != cudaSuccess) {
    return cuda_error(what, ("cudaMallocHost of " + std::to_string(bytes) + " bytes").c_str(), e);
  }
  out.data_ = static_cast<std::byte*>(p);
  out.size_ = bytes;
  return out;
}

void PinnedAllocation::reset() {
  if (data_ == nullptr) return;
  (void)cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
}

Status set_device(int device) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return cuda_error("device " + std::to_string(device), "cudaSetDevice", e);
  }
  return {};
}

Status zero_async(DeviceAddress dst, std::uint64_t bytes, Stream stream, std::string_view what) {
  if (bytes == 0) return {};
  if (cudaError_t e = cudaMemsetAsync(dst.as<void>(), 0, bytes, stream); e != cudaSuccess) {
    return cuda_error(what, "cudaMemsetAsync", e);
  }
  return {};
}

Status copy_to_device_async(DeviceAddress dst, const void* src, std::uint64_t bytes, Stream stream,
                            std::string_view what) {
  if (bytes == 0) return {};
  if (cudaError_t e = cudaMemcpyAsync(dst.as<void>(), src, bytes, cudaMemcpyHostToDevice, stream);
      e != cudaSuccess) {
    return cuda_error(what, "cudaMemcpyAsync", e);
  }
  return {};
}

Status synchronize(Stream stream, std::string_view what) {
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return cuda_error(what, "cudaStreamSynchronize", e);
  }
  return {};
}

}  // namespace epk::cuda
