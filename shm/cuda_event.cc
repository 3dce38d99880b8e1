#include "shm/cuda_event.h"

#include <cstring>

#include "shm/cuda_driver.h"

namespace epk::shm {

using detail::driver;
using detail::make_current;

Status make_device_current(int device) { return make_current(device); }

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
  if (this != &o) {
    reset();
    ev_ = o.ev_;
    device_ = o.device_;
    o.ev_ = nullptr;
  }
  return *this;
}

void CudaEvent::reset() {
  if (ev_ != nullptr) driver().EventDestroy(static_cast<CUevent>(ev_));
  ev_ = nullptr;
}

Result<CudaEvent> CudaEvent::create_with(unsigned flags, int device) {
  EPK_TRY(make_current(device));
  CUevent ev = nullptr;
  EPK_CU(driver().EventCreate(&ev, flags), device);
  CudaEvent e;
  e.ev_ = ev;
  e.device_ = device;
  return e;
}

Result<CudaEvent> CudaEvent::create_interprocess(int device) {
  return create_with(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, device);
}

Result<CudaEvent> CudaEvent::create(int device) { return create_with(CU_EVENT_DISABLE_TIMING, device); }

Result<CudaEvent> CudaEvent::open_ipc(const IpcEventHandle& handle, int device) {
  EPK_TRY(make_current(device));
  CUipcEventHandle h;
  static_assert(sizeof(h) == kIpcEventHandleBytes);
  std::memcpy(&h, handle.data(), sizeof(h));
  CUevent ev = nullptr;
  EPK_CU(driver().IpcOpenEventHandle(&ev, h), device);
  CudaEvent e;
  e.ev_ = ev;
  e.device_ = device;
  return e;
}

Result<IpcEventHandle> CudaEvent::ipc_handle() const {
  CUipcEventHandle h;
  EPK_CU(driver().IpcGetEventHandle(&h, static_cast<CUevent>(ev_)), device_);
  IpcEventHandle out;
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

Status CudaEvent::record(void* stream) const {
  EPK_CU(driver().EventRecord(static_cast<CUevent>(ev_), static_cast<CUstream>(stream)), device_);
  return {};
}

bool CudaEvent::query() const {
  return ev_ != nullptr && driver().EventQuery(static_cast<CUevent>(ev_)) == CUDA_SUCCESS;
}

Result<bool> CudaEvent::poll() const {
  if (ev_ == nullptr) return make_error(ErrorCode::kInternal, "cuEventQuery: no event");
  const CUresult r = driver().EventQuery(static_cast<CUevent>(ev_));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return detail::cuda_error("cuEventQuery", r, device_);
}

Status CudaEvent::synchronize() const {
  EPK_CU(driver().EventSynchronize(static_cast<CUevent>(ev_)), device_);
  return {};
}

CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
  if (this != &o) {
    reset();
    s_ = o.s_;
    device_ = o.device_;
    o.s_ = nullptr;
  }
  return *this;
}

void CudaStream::reset() {
  if (s_ != nullptr) driver().StreamDestroy(static_cast<CUstream>(s_));
  s_ = nullptr;
}

Result<CudaStream> CudaStream::create(int device) {
  EPK_TRY(make_current(device));
  CUstream s = nullptr;
  EPK_CU(driver().StreamCreate(&s, CU_STREAM_NON_BLOCKING), device);
  CudaStream out;
  out.s_ = s;
  out.device_ = device;
  return out;
}

Status CudaStream::wait(void* event) const {
  EPK_CU(driver().StreamWaitEvent(static_cast<CUstream>(s_), static_cast<CUevent>(event), 0), device_);
  return {};
}

Status CudaStream::synchronize() const {
  EPK_CU(driver().StreamSynchronize(static_cast<CUstream>(s_)), device_);
  return {};
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    size_ = o.size_;
    device_ = o.device_;
    o.ptr_ = 0;
    o.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (ptr_ != 0) driver().MemFree(ptr_);
  ptr_ = 0;
  size_ = 0;
}

Result<DeviceBuffer> DeviceBuffer::alloc(std::uint64_t bytes, int device) {
  EPK_TRY(make_current(device));
  CUdeviceptr p = 0;
  EPK_CU(driver().MemAlloc(&p, bytes == 0 ? 16 : bytes), device);
  DeviceBuffer b;
  b.ptr_ = p;
  b.size_ = bytes;
  b.device_ = device;
  return b;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = o.p_;
    size_ = o.size_;
    o.p_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void PinnedBuffer::reset() {
  if (p_ != nullptr) driver().MemFreeHost(p_);
  p_ = nullptr;
  size_ = 0;
}

Result<PinnedBuffer> PinnedBuffer::alloc(std::uint64_t bytes, int device) {
  EPK_TRY(make_current(device));
  void* p = nullptr;
  EPK_CU(driver().MemHostAlloc(&p, bytes == 0 ? 16 : bytes, 0), device);
  PinnedBuffer b;
  b.p_ = static_cast<std::uint8_t*>(p);
  b.size_ = bytes;
  return b;
}

HostRegistration& HostRegistration::operator=(HostRegistration&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = o.p_;
    device_ = o.device_;
    o.p_ = nullptr;
  }
  return *this;
}

void HostRegistration::reset() {
  // The thread's current context is restored after: a lane of another device may drop the last hold of a host tier
  // this one registered, and go on freeing its own device's objects.
  if (p_ != nullptr) {
    CUcontext before = nullptr;
    const bool known = driver().CtxGetCurrent(&before) == CUDA_SUCCESS;
    if (make_current(device_)) driver().MemHostUnregister(p_);
    if (known && before != nullptr) driver().CtxSetCurrent(before);
  }
  p_ = nullptr;
}

Result<HostRegistration> HostRegistration::register_memory(const void* p, std::uint64_t bytes, bool read_only,
                                                           int device) {
  EPK_TRY(make_current(device));
  if (read_only) {
    CUdevice dev = 0;
    EPK_CU(driver().DeviceGet(&dev, device), device);
    int supported = 0;
    EPK_CU(driver().DeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, dev),
           device);
    if (supported == 0) {
      return make_error(ErrorCode::kUnsupported, "device " + std::to_string(device) +
                                                     " cannot register read-only host memory with the driver");
    }
  }
  unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
  if (read_only) flags |= CU_MEMHOSTREGISTER_READ_ONLY;
  void* q = const_cast<void*>(p);  // the driver's signature; READ_ONLY registration never writes
  EPK_CU(driver().MemHostRegister(q, bytes, flags), device);
  HostRegistration r;
  r.p_ = q;
  r.device_ = device;
  return r;
}

Status copy_to_device_async(DeviceAddress dst, const void* src, std::uint64_t bytes, void* stream, int device) {
  EPK_TRY(make_current(device));
  EPK_CU(driver().MemcpyHtoDAsync(dst.value, src, bytes, static_cast<CUstream>(stream)), device);
  return {};
}

Status copy_from_device_async(void* dst, DeviceAddress src, std::uint64_t bytes, void* stream, int device) {
  EPK_TRY(make_current(device));
  EPK_CU(driver().MemcpyDtoHAsync(dst, src.value, bytes, static_cast<CUstream>(stream)), device);
  return {};
}

Status copy_2d_device_async(DeviceAddress dst, std::uint64_t dst_pitch, DeviceAddress src, std::uint64_t src_pitch,
                            std::uint64_t width, std::uint64_t height, void* stream, int device) {
  if (width == 0 || height == 0) return {};
  EPK_TRY(make_current(device));
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src.value;
  c.srcPitch = src_pitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst.value;
  c.dstPitch = dst_pitch;
  c.WidthInBytes = width;
  c.Height = height;
  EPK_CU(driver().Memcpy2DAsync(&c, static_cast<CUstream>(stream)), device);
  return {};
}

Status event_synchronize(void* event) {
  EPK_CU(driver().EventSynchronize(static_cast<CUevent>(event)), -1);
  return {};
}

Result<bool> stream_idle(void* stream, int device) {
  EPK_TRY(make_current(device));
  const CUresult r = driver().StreamQuery(static_cast<CUstream>(stream));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return detail::cuda_error("cuStreamQuery", r, device);
}

Status stream_wait_event(void* stream, void* event) {
  EPK_CU(driver().StreamWaitEvent(static_cast<CUstream>(stream), static_cast<CUevent>(event), 0), -1);
  return {};
}

Status fill_device_async(DeviceAddress dst, std::uint8_t value, std::uint64_t bytes, void* stream, int device) {
  EPK_TRY(make_current(device));
  EPK_CU(driver().MemsetD8Async(dst.value, value, bytes, static_cast<CUstream>(stream)), device);
  return {};
}

}  // namespace epk::shm
