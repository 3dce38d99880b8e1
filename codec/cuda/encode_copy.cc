#include "codec/cuda/encode_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

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

// The whole pages inside [p, p + n): the part of a host range that can be registered without touching bytes
// outside it, so ranges that share a page with a neighbour (adjacent tensors of one mapped file) never overlap.
struct PageSpan {
  std::uintptr_t begin = 0, end = 0;
  std::size_t size() const { return end > begin ? end - begin : 0; }
};

std::uintptr_t page_size() {
  static const std::uintptr_t page = std::uintptr_t(sysconf(_SC_PAGESIZE));
  return page;
}

PageSpan inner_pages(const void* p, std::size_t n) {
  const std::uintptr_t page = page_size();
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  return {(b + page - 1) / page * page, (b + n) / page * page};
}

// Whether every page of the span is in memory. Registering pins the pages, reading those of a file that are not
// cached one at a time, while the staged copy's threads fault them in together: with the page cache dropped, `epk
// compress` of the 8B folder took 12.3-12.5 s registering against 11.4 s staged (docs/NOTES.md).
bool resident(PageSpan pages) {
  std::vector<unsigned char> in(pages.size() / page_size());
  if (in.empty() || ::mincore(reinterpret_cast<void*>(pages.begin), pages.size(), in.data()) != 0) return false;
  return std::all_of(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; });
}

// Whether p is host memory CUDA knows nothing of (not pinned, not registered): pages that are would be refused.
bool unregistered(std::uintptr_t p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, reinterpret_cast<const void*>(p)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeUnregistered;
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
  const PageSpan pages = n >= kChunk ? inner_pages(src, n) : PageSpan{};
  if (pages.size() > 0 && unregistered(pages.begin) && unregistered(pages.end - 1) && resident(pages)) {
    // Read-only registration pins the source's pages (a PROT_READ file mapping included) for the copy's duration.
    // Pages already pinned or registered (by the caller, or by a copy of overlapping bytes on another thread, whose
    // registration may end at any time) are staged instead, as is a range the device or the memory refuses; a
    // refused call's error is cleared so that later checks of cudaGetLastError do not see it.
    if (cudaHostRegister(reinterpret_cast<void*>(pages.begin), pages.size(), cudaHostRegisterReadOnly) ==
        cudaSuccess) {
      const cudaError_t e = direct_to_device(dst, src, n, pages.begin, pages.end, stream);
      const cudaError_t u = cudaHostUnregister(reinterpret_cast<void*>(pages.begin));
      return e != cudaSuccess ? e : u;
    }
    cudaGetLastError();
  }
  return staged_to_device(dst, src, n, stream);
}

cudaError_t StagedCopier::direct_to_device(void* dst, const void* src, std::size_t n, std::uintptr_t begin,
                                           std::uintptr_t end, cudaStream_t stream) {
  const auto b = reinterpret_cast<std::uintptr_t>(src);
  auto* out = static_cast<std::byte*>(dst);
  // The partial pages at either end (under a page each) go through the two slots.
  const std::size_t head = begin - b, tail = b + n - end;
  std::memcpy(slot_[0], src, head);
  std::memcpy(slot_[1], reinterpret_cast<const void*>(end), tail);
  cudaError_t e = cudaSuccess;
  if (head) e = cudaMemcpyAsync(out, slot_[0], head, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(out + head, reinterpret_cast<const void*>(begin), end - begin, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess && tail) e = cudaMemcpyAsync(out + (end - b), slot_[1], tail, cudaMemcpyHostToDevice, stream);
  // Every copy queued is waited for, even after an error: the pages are unregistered next.
  const cudaError_t s = cudaStreamSynchronize(stream);
  return e != cudaSuccess ? e : s;
}

cudaError_t StagedCopier::staged_to_device(void* dst, const void* src, std::size_t n, cudaStream_t stream) {
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
