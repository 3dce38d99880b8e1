// Device pools: one CUDA VMM allocation (cuMemCreate with the POSIX fd handle type) exported as a POSIX fd, which the
// daemon maps into its own address space and passes to clients once (SCM_RIGHTS); a client imports the fd, maps it and
// sets read-write access for the device. Built only with the CUDA toolkit (EPK_HAVE_CUDA, target epk_shm_cuda); the
// driver API is loaded at run time (dlopen, shm/cuda_driver.h) and used on the device's primary context. epkd serves
// from one of these per device (daemon/lanes/gpu_backend.h) and libepk imports it (client/device_client.cc); both
// checked on the GPU by tests/daemon/epkd_gpu_test.cc (docs/measurements/device-test-runs.md).
#pragma once

#include <cstdint>
#include <memory>

#include "codec/common/device_address.h"
#include "codec/common/result.h"
#include "shm/pool.h"
#include "shm/unique_fd.h"

namespace epk::shm {

// A reserved and mapped range of device virtual addresses over one VMM allocation handle. Move-only: destruction (and
// move assignment, first) unmaps, frees the range and releases the handle.
class DeviceMapping {
 public:
  DeviceMapping() = default;
  DeviceMapping(DeviceMapping&& o) noexcept { *this = std::move(o); }
  DeviceMapping& operator=(DeviceMapping&& o) noexcept;
  DeviceMapping(const DeviceMapping&) = delete;
  DeviceMapping& operator=(const DeviceMapping&) = delete;
  ~DeviceMapping() { reset(); }

  // Maps `handle` (a CUmemGenericAllocationHandle, owned from now on) of `size` bytes on `device`, read-write.
  static Result<DeviceMapping> map(std::uint64_t handle, std::uint64_t size, int device);

  DeviceAddress device_ptr() const { return DeviceAddress(ptr_); }
  std::uint64_t size() const { return size_; }
  int device() const { return device_; }

 private:
  void reset();
  std::uint64_t handle_ = 0;
  std::uint64_t ptr_ = 0;  // a CUdeviceptr
  std::uint64_t size_ = 0;
  int device_ = -1;
  bool mapped_ = false;
};

class DevicePool final : public Pool {
 public:
  // `size` is rounded up to the allocation granularity. kCuda errors name the call and the device.
  static Result<std::unique_ptr<DevicePool>> create(int device, std::uint64_t size);

  PoolKind kind() const override { return PoolKind::kDevice; }
  int device() const override { return mapping_.device(); }
  std::uint64_t size() const override { return mapping_.size(); }
  int export_fd() const override { return fd_.get(); }
  std::span<std::uint8_t> host_span(std::uint64_t, std::uint64_t) override { return {}; }
  DeviceAddress device_ptr() const { return mapping_.device_ptr(); }

 private:
  DevicePool(UniqueFd fd, DeviceMapping mapping) : fd_(std::move(fd)), mapping_(std::move(mapping)) {}
  UniqueFd fd_;
  DeviceMapping mapping_;
};

// Client side: imports a device pool fd (from the hello reply; the fd is consumed) of `size` bytes on `device`.
Result<DeviceMapping> import_device_pool(UniqueFd fd, std::uint64_t size, int device);

// Synchronous copies between host memory and a device address (a pool's range), on the primary context of `device`.
Status copy_to_device(DeviceAddress dst, const void* src, std::uint64_t bytes, int device);
Status copy_from_device(void* dst, DeviceAddress src, std::uint64_t bytes, int device);

// Whether libcuda.so.1 loads, the driver initialises and `device` exists (tests skip otherwise). The driver is loaded
// with dlopen, so binaries using this run (and skip) on machines without it.
bool cuda_device_available(int device);
// How many CUDA devices the driver reports (0 where it does not load).
int cuda_device_count();

}  // namespace epk::shm
