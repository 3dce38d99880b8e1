// The CUDA driver API, loaded once with dlopen (shm/device_pool.cc holds the one loader), so that epkd, libepk and
// the tests load and skip on machines without the NVIDIA driver. cuda.h is used for its types only. Internal to
// epk_shm_cuda and its users (daemon/gpu_*, client/device_*); not a public header of libepk.
#pragma once

#include <cuda.h>

#include <string>

#include "codec/common/result.h"

namespace epk::shm::detail {

struct Driver {
  bool ok = false;  // every symbol below resolved
  decltype(&cuInit) Init = nullptr;
  decltype(&cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&cuDeviceGet) DeviceGet = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain = nullptr;
  decltype(&cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&cuCtxGetCurrent) CtxGetCurrent = nullptr;
  decltype(&cuCtxSynchronize) CtxSynchronize = nullptr;
  decltype(&cuGetErrorName) GetErrorName = nullptr;
  decltype(&cuMemGetAllocationGranularity) MemGetAllocationGranularity = nullptr;
  decltype(&cuMemCreate) MemCreate = nullptr;
  decltype(&cuMemRelease) MemRelease = nullptr;
  decltype(&cuMemExportToShareableHandle) MemExportToShareableHandle = nullptr;
  decltype(&cuMemImportFromShareableHandle) MemImportFromShareableHandle = nullptr;
  decltype(&cuMemGetAllocationPropertiesFromHandle) MemGetAllocationPropertiesFromHandle = nullptr;
  decltype(&cuMemAddressReserve) MemAddressReserve = nullptr;
  decltype(&cuMemAddressFree) MemAddressFree = nullptr;
  decltype(&cuMemMap) MemMap = nullptr;
  decltype(&cuMemUnmap) MemUnmap = nullptr;
  decltype(&cuMemSetAccess) MemSetAccess = nullptr;
  decltype(&cuMemcpyHtoD) MemcpyHtoD = nullptr;
  decltype(&cuMemcpyDtoH) MemcpyDtoH = nullptr;
  // Events, streams and plain allocations (the GPU serving path).
  decltype(&cuEventCreate) EventCreate = nullptr;
  decltype(&cuEventDestroy) EventDestroy = nullptr;
  decltype(&cuEventRecord) EventRecord = nullptr;
  decltype(&cuEventQuery) EventQuery = nullptr;
  decltype(&cuEventSynchronize) EventSynchronize = nullptr;
  decltype(&cuIpcGetEventHandle) IpcGetEventHandle = nullptr;
  decltype(&cuIpcOpenEventHandle) IpcOpenEventHandle = nullptr;
  decltype(&cuStreamCreate) StreamCreate = nullptr;
  decltype(&cuStreamDestroy) StreamDestroy = nullptr;
  decltype(&cuStreamWaitEvent) StreamWaitEvent = nullptr;
  decltype(&cuStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&cuStreamQuery) StreamQuery = nullptr;
  decltype(&cuMemAlloc) MemAlloc = nullptr;
  decltype(&cuMemFree) MemFree = nullptr;
  decltype(&cuMemHostAlloc) MemHostAlloc = nullptr;
  decltype(&cuMemFreeHost) MemFreeHost = nullptr;
  decltype(&cuMemHostRegister) MemHostRegister = nullptr;
  decltype(&cuMemHostUnregister) MemHostUnregister = nullptr;
  decltype(&cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&cuMemcpyHtoDAsync) MemcpyHtoDAsync = nullptr;
  decltype(&cuMemcpyDtoHAsync) MemcpyDtoHAsync = nullptr;
  decltype(&cuMemsetD8Async) MemsetD8Async = nullptr;
  decltype(&cuMemcpy2DAsync) Memcpy2DAsync = nullptr;
};

const Driver& driver();
// kCuda error naming the call, the device and the driver's error name.
Error cuda_error(const char* call, CUresult r, int device);
// Sets `device`'s primary context current on this thread (retained once per process).
Status make_current(int device);

#define EPK_CU(call, device)                                                                   \
  do {                                                                                         \
    CUresult epk_cu_r_ = (call);                                                               \
    if (epk_cu_r_ != CUDA_SUCCESS) return ::epk::shm::detail::cuda_error(#call, epk_cu_r_, device); \
  } while (0)

}  // namespace epk::shm::detail
