#include <cuda_runtime.h>

#include "tests/daemon/stream_hold.h"

namespace epk::test_harness {
namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_until_released(volatile unsigned* flags, unsigned long long max_ns) {
  const unsigned long long start = global_ns();
  while (flags[0] == 0) {
    if (global_ns() - start > max_ns) {
      flags[1] = 1;
      return;
    }
    __nanosleep(2000);
  }
}

}  // namespace

StreamHold::StreamHold(void* stream, int device, unsigned max_ms) {
  cudaError_t e = cudaSetDevice(device);
  void* host = nullptr;
  if (e == cudaSuccess) e = cudaHostAlloc(&host, 2 * sizeof(unsigned), cudaHostAllocMapped);
  if (e != cudaSuccess) {
    error_ = std::string("StreamHold: ") + cudaGetErrorString(e);
    return;
  }
  flags_ = static_cast<volatile unsigned*>(host);
  flags_[0] = 0;
  flags_[1] = 0;
  void* dev = nullptr;
  e = cudaHostGetDevicePointer(&dev, host, 0);
  if (e == cudaSuccess) {
    spin_until_released<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<volatile unsigned*>(dev),
                                                                         max_ms * 1000000ull);
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) {
    error_ = std::string("StreamHold: ") + cudaGetErrorString(e);
    flags_[0] = 1;
  }
}

void StreamHold::release() {
  if (flags_ != nullptr) {
    __atomic_store_n(const_cast<unsigned*>(flags_), 1u, __ATOMIC_SEQ_CST);
  }
}

bool StreamHold::timed_out() const { return flags_ != nullptr && flags_[1] != 0; }

StreamHold::~StreamHold() {
  release();
  // The kernel reads the flags until it sees the release: wait for it before freeing them.
  if (flags_ != nullptr) {
    (void)cudaDeviceSynchronize();
    (void)cudaFreeHost(const_cast<unsigned*>(flags_));
  }
}

}  // namespace epk::test_harness
