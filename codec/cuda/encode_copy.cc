#include "codec/cuda/encode_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "codec/common/parallel.h"

namespace epk::cuda {

namespace {

constexpr std::size_t kChunk = std::size_t{16} << 20;  // bytes per staging slot
constexpr std::size_t kPiece = std::size_t{1} << 20;   // bytes per host thread's memcpy block

int copy_threads() { return int(std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u)); }

void parallel_memcpy(void* dst, const void* src, std::size_t n) {
  if (n <= kPiece) {
    std::memcpy(dst, src, n);
    return;
  }
  parallel_for_blocks(n, kPiece, copy_threads(), [&](std::size_t b, std::size_t e) {
    std::memcpy(static_cast<std::byte*>(dst) + b, static_cast<const std::byte*>(src) + b, e - b);
  });
}

}  // namespace

StagedCopier::~StagedCopier() {
  for (int i = 0; i < 2; ++i) {
    if (done_[i]) cudaEventDestroy(done_[i]);
    if (slot_[i]) cudaFreeHost(slot_[i]);
  }
}

cudaError_t StagedCopier::init() {
  for (int i = 0; i < 2; ++i) {
    if (!slot_[i]) {
      if (cudaError_t e = cudaMallocHost(&slot_[i], kChunk); e != cudaSuccess) return e;
    }
    if (!done_[i]) {
      if (cudaError_t e = cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming); e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

cudaError_t StagedCopier::to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream) {
  if (cudaError_t e = init(); e != cudaSuccess) return e;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  for (std::size_t k = 0; k < chunks; ++k) {
    const int s = int(k & 1);
    const std::size_t off = k * kChunk, len = std::min(kChunk, n - off);
    // The slot's previous DMA must be done before its bytes are replaced.
    if (k >= 2) {
      if (cudaError_t e = cudaEventSynchronize(done_[s]); e != cudaSuccess) return e;
    }
    parallel_memcpy(slot_[s], static_cast<const std::byte*>(src) + off, len);
    if (cudaError_t e = cudaMemcpyAsync(static_cast<std::byte*>(dst) + off, slot_[s], len, cudaMemcpyHostToDevice,
                                        stream);
        e != cudaSuccess) {
      return e;
    }
    if (cudaError_t e = cudaEventRecord(done_[s], stream); e != cudaSuccess) return e;
  }
  return cudaStreamSynchronize(stream);
}

cudaError_t StagedCopier::to_host(void* dst, const void* src, std::size_t n, cudaStream_t stream) {
  if (cudaError_t e = init(); e != cudaSuccess) return e;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  auto issue = [&](std::size_t k) {
    const int s = int(k & 1);
    const std::size_t off = k * kChunk, len = std::min(kChunk, n - off);
    cudaError_t e = cudaMemcpyAsync(slot_[s], static_cast<const std::byte*>(src) + off, len,
                                    cudaMemcpyDeviceToHost, stream);
    return e == cudaSuccess ? cudaEventRecord(done_[s], stream) : e;
  };
  if (chunks) {
    if (cudaError_t e = issue(0); e != cudaSuccess) return e;
  }
  for (std::size_t k = 0; k < chunks; ++k) {
    // Chunk k+1's DMA runs while chunk k is copied out of its slot.
    if (k + 1 < chunks) {
      if (cudaError_t e = issue(k + 1); e != cudaSuccess) return e;
    }
    const int s = int(k & 1);
    if (cudaError_t e = cudaEventSynchronize(done_[s]); e != cudaSuccess) return e;
    const std::size_t off = k * kChunk, len = std::min(kChunk, n - off);
    parallel_memcpy(static_cast<std::byte*>(dst) + off, slot_[s], len);
  }
  return cudaSuccess;
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

cudaError_t PinnedBuffer::reserve(std::size_t bytes) {
  if (bytes <= size_) return cudaSuccess;
  if (p_) cudaFreeHost(p_);
  p_ = nullptr;
  size_ = 0;
  const std::size_t want = std::max<std::size_t>(bytes, 4096);
  const cudaError_t e = cudaMallocHost(&p_, want);
  if (e == cudaSuccess) size_ = want;
  return e;
}

}  // namespace epk::cuda
