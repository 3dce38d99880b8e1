// Move-only owners of the CUDA resources the GPU serving path uses besides pools: interprocess events (decode-done
// and release fences), streams, plain device allocations and pinned host buffers. All calls go through the dlopen'ed
// driver (shm/cuda_driver.h), so code using these loads and fails cleanly (kCuda) without a driver. Handles are
// exposed as void* (a CUevent / CUstream, interchangeable with cudaEvent_t / cudaStream_t) so no CUDA header leaks.
#pragma once

#include <cstdint>

#include "codec/common/device_address.h"
#include "codec/common/result.h"
#include "shm/protocol.h"

namespace epk::shm {

class CudaEvent {
 public:
  CudaEvent() = default;
  CudaEvent(CudaEvent&& o) noexcept { *this = std::move(o); }
  CudaEvent& operator=(CudaEvent&& o) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() { reset(); }

  // CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING on `device` (its primary context).
  static Result<CudaEvent> create_interprocess(int device);
  // CU_EVENT_DISABLE_TIMING on `device`: a daemon-private marker (the per-slot release fences, daemon/cache/fence_pool.h).
  static Result<CudaEvent> create(int device);
  // Opens another process's event (cuIpcOpenEventHandle); destroyed like any event.
  static Result<CudaEvent> open_ipc(const IpcEventHandle& handle, int device);

  Result<IpcEventHandle> ipc_handle() const;
  Status record(void* stream) const;
  // Non-blocking: true once the last recorded work has completed (false on error too).
  bool query() const;
  // Non-blocking, errors kept apart: true done, false not yet (CUDA_ERROR_NOT_READY), an error for anything else (a
  // sticky context error must not read as "done", nor as "not yet" forever without a word).
  Result<bool> poll() const;
  Status synchronize() const;
  void* get() const { return ev_; }
  int device() const { return device_; }
  explicit operator bool() const { return ev_ != nullptr; }

 private:
  static Result<CudaEvent> create_with(unsigned flags, int device);
  void reset();
  void* ev_ = nullptr;
  int device_ = -1;
};

class CudaStream {
 public:
  CudaStream() = default;
  CudaStream(CudaStream&& o) noexcept { *this = std::move(o); }
  CudaStream& operator=(CudaStream&& o) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream() { reset(); }

  // A non-blocking stream (no implicit sync with the legacy default stream) on `device`.
  static Result<CudaStream> create(int device);
  // Stream-ordered wait for `event`'s most recent recording (cuStreamWaitEvent); the CPU does not block.
  Status wait(void* event) const;
  Status synchronize() const;
  void* get() const { return s_; }
  int device() const { return device_; }

 private:
  void reset();
  void* s_ = nullptr;
  int device_ = -1;
};

// cuMemAlloc'ed device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  static Result<DeviceBuffer> alloc(std::uint64_t bytes, int device);
  DeviceAddress address() const { return DeviceAddress(ptr_); }
  std::uint64_t size() const { return size_; }

 private:
  void reset();
  std::uint64_t ptr_ = 0;  // a CUdeviceptr
  std::uint64_t size_ = 0;
  int device_ = -1;
};

// Page-locked host memory (cuMemHostAlloc), the source of asynchronous host-to-device copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept { *this = std::move(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { reset(); }

  static Result<PinnedBuffer> alloc(std::uint64_t bytes, int device);
  std::uint8_t* data() const { return p_; }
  std::uint64_t size() const { return size_; }

 private:
  void reset();
  std::uint8_t* p_ = nullptr;
  std::uint64_t size_ = 0;
};

// Host memory this process mapped (a host tier: shm/host_tier.h) page-locked with the driver for every context
// (cuMemHostRegister, portable and device-mapped): copies from it run at the copy engine's speed and kernels may read
// it in place at the same address. Read-only mappings (a client's map of a sealed memfd) need the device's
// read-only registration (CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED): kUnsupported where it lacks it.
// Unregistered on destruction; the memory must outlive this object.
class HostRegistration {
 public:
  HostRegistration() = default;
  HostRegistration(HostRegistration&& o) noexcept { *this = std::move(o); }
  HostRegistration& operator=(HostRegistration&& o) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration() { reset(); }

  static Result<HostRegistration> register_memory(const void* p, std::uint64_t bytes, bool read_only, int device);
  bool registered() const { return p_ != nullptr; }

 private:
  void reset();
  void* p_ = nullptr;
  int device_ = -1;
};

// Stream-ordered copies and fills on `device` (its primary context made current on this thread).
Status copy_to_device_async(DeviceAddress dst, const void* src, std::uint64_t bytes, void* stream, int device);
Status copy_from_device_async(void* dst, DeviceAddress src, std::uint64_t bytes, void* stream, int device);
Status fill_device_async(DeviceAddress dst, std::uint8_t value, std::uint64_t bytes, void* stream, int device);
// Device to device, `height` rows of `width` bytes: row i from src + i * src_pitch to dst + i * dst_pitch (a column
// slice of a row-major array).
Status copy_2d_device_async(DeviceAddress dst, std::uint64_t dst_pitch, DeviceAddress src, std::uint64_t src_pitch,
                            std::uint64_t width, std::uint64_t height, void* stream, int device);
// Makes `stream` (null: the legacy default stream of the current context) wait on `event` without blocking the CPU.
Status stream_wait_event(void* stream, void* event);
// Whether every operation queued on `stream` (null: the legacy default stream) has completed (cuStreamQuery on
// `device`'s primary context): true, false (still running), or an error for anything but "not ready".
Result<bool> stream_idle(void* stream, int device);
// Blocks the calling thread until `event` (a CUevent, e.g. one opened from another process) has completed.
Status event_synchronize(void* event);
// Makes `device`'s primary context current on the calling thread (runtime-API code such as codec/cuda then uses it).
Status make_device_current(int device);

}  // namespace epk::shm
