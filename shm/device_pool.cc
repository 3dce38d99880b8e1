#include "shm/device_pool.h"

#include "shm/cuda_driver.h"

#include <cuda.h>
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

namespace epk::shm {
namespace detail {

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    bool all = true;
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      all = all && fn != nullptr;
    };
    load(d.Init, "cuInit");
    load(d.DeviceGetCount, "cuDeviceGetCount");
    load(d.DeviceGet, "cuDeviceGet");
    load(d.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    load(d.CtxSetCurrent, "cuCtxSetCurrent");
    load(d.CtxGetCurrent, "cuCtxGetCurrent");
    load(d.CtxSynchronize, "cuCtxSynchronize");
    load(d.GetErrorName, "cuGetErrorName");
    load(d.MemGetAllocationGranularity, "cuMemGetAllocationGranularity");
    load(d.MemCreate, "cuMemCreate");
    load(d.MemRelease, "cuMemRelease");
    load(d.MemExportToShareableHandle, "cuMemExportToShareableHandle");
    load(d.MemImportFromShareableHandle, "cuMemImportFromShareableHandle");
    load(d.MemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle");
    load(d.MemAddressReserve, "cuMemAddressReserve");
    load(d.MemAddressFree, "cuMemAddressFree");
    load(d.MemMap, "cuMemMap");
    load(d.MemUnmap, "cuMemUnmap");
    load(d.MemSetAccess, "cuMemSetAccess");
    load(d.MemcpyHtoD, "cuMemcpyHtoD_v2");
    load(d.MemcpyDtoH, "cuMemcpyDtoH_v2");
    load(d.EventCreate, "cuEventCreate");
    load(d.EventDestroy, "cuEventDestroy_v2");
    load(d.EventRecord, "cuEventRecord");
    load(d.EventQuery, "cuEventQuery");
    load(d.EventSynchronize, "cuEventSynchronize");
    load(d.IpcGetEventHandle, "cuIpcGetEventHandle");
    load(d.IpcOpenEventHandle, "cuIpcOpenEventHandle");
    load(d.StreamCreate, "cuStreamCreate");
    load(d.StreamDestroy, "cuStreamDestroy_v2");
    load(d.StreamWaitEvent, "cuStreamWaitEvent");
    load(d.StreamSynchronize, "cuStreamSynchronize");
    load(d.StreamQuery, "cuStreamQuery");
    load(d.MemAlloc, "cuMemAlloc_v2");
    load(d.MemFree, "cuMemFree_v2");
    load(d.MemHostAlloc, "cuMemHostAlloc");
    load(d.MemFreeHost, "cuMemFreeHost");
    load(d.MemHostRegister, "cuMemHostRegister_v2");
    load(d.MemHostUnregister, "cuMemHostUnregister");
    load(d.DeviceGetAttribute, "cuDeviceGetAttribute");
    load(d.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    load(d.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    load(d.MemsetD8Async, "cuMemsetD8Async");
    load(d.Memcpy2DAsync, "cuMemcpy2DAsync_v2");
    d.ok = all;
  });
  return d;
}

Error cuda_error(const char* call, CUresult r, int device) {
  const char* name = nullptr;
  driver().GetErrorName(r, &name);
  return make_error(ErrorCode::kCuda, std::string(call) + " on device " + std::to_string(device) + ": " +
                                          (name != nullptr ? name : std::to_string(static_cast<int>(r))));
}

// VMM calls need a current context: the device's primary context, retained once per process and device (never
// released: the driver tears it down at exit); each call only sets it current on the calling thread.
Status make_current(int device) {
  if (!driver().ok) return make_error(ErrorCode::kCuda, "libcuda.so.1 (the NVIDIA driver) is not loadable");
  static std::mutex mu;
  static std::vector<CUcontext> contexts;
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (device < 0 || device > 1024) return make_error(ErrorCode::kInvalidArgument, "CUDA device ordinal out of range");
    if (contexts.size() <= static_cast<std::size_t>(device)) contexts.resize(device + 1, nullptr);
    if (contexts[device] == nullptr) {
      EPK_CU(driver().Init(0), device);
      CUdevice dev;
      EPK_CU(driver().DeviceGet(&dev, device), device);
      EPK_CU(driver().DevicePrimaryCtxRetain(&contexts[device], dev), device);
    }
    ctx = contexts[device];
  }
  EPK_CU(driver().CtxSetCurrent(ctx), device);
  return {};
}

}  // namespace detail

namespace {
using detail::cuda_error;
using detail::driver;
using detail::make_current;

CUmemAllocationProp allocation_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (!driver().ok || driver().Init(0) != CUDA_SUCCESS || driver().DeviceGetCount(&count) != CUDA_SUCCESS) return 0;
  return count;
}

bool cuda_device_available(int device) {
  int count = 0;
  return driver().ok && driver().Init(0) == CUDA_SUCCESS && driver().DeviceGetCount(&count) == CUDA_SUCCESS &&
         device >= 0 && device < count;
}

DeviceMapping& DeviceMapping::operator=(DeviceMapping&& o) noexcept {
  if (this != &o) {
    reset();
    handle_ = o.handle_;
    ptr_ = o.ptr_;
    size_ = o.size_;
    device_ = o.device_;
    mapped_ = o.mapped_;
    o.handle_ = 0;
    o.ptr_ = 0;
    o.size_ = 0;
    o.mapped_ = false;
  }
  return *this;
}

void DeviceMapping::reset() {
  if (mapped_) driver().MemUnmap(ptr_, size_);
  if (ptr_ != 0) driver().MemAddressFree(ptr_, size_);
  if (handle_ != 0) driver().MemRelease(handle_);
  handle_ = ptr_ = size_ = 0;
  mapped_ = false;
}

Result<DeviceMapping> DeviceMapping::map(std::uint64_t handle, std::uint64_t size, int device) {
  DeviceMapping m;
  m.handle_ = handle;  // owned from here: released by m on any failure below
  m.device_ = device;
  m.size_ = size;
  CUdeviceptr ptr = 0;
  EPK_CU(driver().MemAddressReserve(&ptr, size, 0, 0, 0), device);
  m.ptr_ = ptr;
  EPK_CU(driver().MemMap(ptr, size, 0, handle, 0), device);
  m.mapped_ = true;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EPK_CU(driver().MemSetAccess(ptr, size, &access, 1), device);
  return m;
}

Result<std::unique_ptr<DevicePool>> DevicePool::create(int device, std::uint64_t size) {
  EPK_TRY(make_current(device));
  CUmemAllocationProp prop = allocation_prop(device);
  std::size_t granularity = 0;
  EPK_CU(driver().MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), device);
  if (size == 0 || granularity == 0) return make_error(ErrorCode::kInvalidArgument, "device pool: size 0");
  const std::uint64_t rounded = (size + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  EPK_CU(driver().MemCreate(&handle, rounded, &prop, 0), device);
  int fd = -1;
  if (CUresult r = driver().MemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      r != CUDA_SUCCESS) {
    driver().MemRelease(handle);
    return cuda_error("cuMemExportToShareableHandle", r, device);
  }
  UniqueFd owned(fd);
  EPK_TRY_ASSIGN(DeviceMapping mapping, DeviceMapping::map(handle, rounded, device));
  return std::unique_ptr<DevicePool>(new DevicePool(std::move(owned), std::move(mapping)));
}

Status copy_to_device(DeviceAddress dst, const void* src, std::uint64_t bytes, int device) {
  EPK_TRY(make_current(device));
  EPK_CU(driver().MemcpyHtoD(dst.value, src, bytes), device);
  return {};
}

Status copy_from_device(void* dst, DeviceAddress src, std::uint64_t bytes, int device) {
  EPK_TRY(make_current(device));
  EPK_CU(driver().MemcpyDtoH(dst, src.value, bytes), device);
  return {};
}

Result<DeviceMapping> import_device_pool(UniqueFd fd, std::uint64_t size, int device) {
  EPK_TRY(make_current(device));
  CUmemGenericAllocationHandle handle = 0;
  EPK_CU(driver().MemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd.get())),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         device);
  // The handle holds the allocation now; our fd copy is no longer needed (UniqueFd closes it).
  CUmemAllocationProp prop{};
  if (CUresult r = driver().MemGetAllocationPropertiesFromHandle(&prop, handle); r != CUDA_SUCCESS) {
    driver().MemRelease(handle);
    return cuda_error("cuMemGetAllocationPropertiesFromHandle", r, device);
  }
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != device) {
    driver().MemRelease(handle);
    return make_error(ErrorCode::kBadInput, "device pool fd: the allocation lives on device " +
                                                std::to_string(prop.location.id) + ", the daemon said " +
                                                std::to_string(device));
  }
  return DeviceMapping::map(handle, size, device);
}

}  // namespace epk::shm
