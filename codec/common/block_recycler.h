// Large host blocks kept for reuse instead of going back to the operating system: a block that is freed and
// allocated again costs its page faults each time (a fresh payload's download takes about three times a recycled
// one's: docs/measurements/gpu-encoder.md). `epk compress` frees each
// tensor's encoded payload once it is written and allocates the next one of much the same size, which glibc hands
// back to the kernel and faults in again when the blocks are large.
// Blocks are grouped by size class (the size rounded up to 2 MiB); a request takes a kept block of its own class or
// of the next kBiggerClasses, else a fresh block, faulted in huge pages where the kernel gives them. At most
// kKeptBlocks blocks and kKeptBytes are kept; a block given back beyond that is freed, and the kept ones stay the
// process's until it exits (the encoders and the tools hold PayloadWords; epkd does not). Thread-safe.
// A device encoder installs a Pinner: from then on blocks are pinned (registered for direct device copies) when they
// are first kept, so that a payload is downloaded straight into a recycled block instead of through staging memory
// (docs/decisions/gpu-encoder.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace epk {

class BlockRecycler {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;  // smaller requests are not recycled
  static constexpr std::size_t kClassBytes = std::size_t{2} << 20;
  static constexpr std::size_t kBiggerClasses = 2;
  static constexpr std::size_t kKeptBlocks = 32;
  static constexpr std::size_t kKeptBytes = std::size_t{1} << 30;

  // The process's recycler (never destroyed, so blocks given back during exit still find it).
  static BlockRecycler& process();

  // A block of at least `bytes` (>= kMinBytes); std::bad_alloc when none can be had.
  void* take(std::size_t bytes);
  // A block take(bytes) returned, with the same `bytes`.
  void give(void* p, std::size_t bytes) noexcept;

  std::size_t kept_blocks() const;
  std::size_t kept_bytes() const;

  // Pins and unpins a block (pin returns false where it could not: the block then stays unpinned).
  struct Pinner {
    using Pin = bool (*)(void* p, std::size_t bytes);
    using Unpin = void (*)(void* p);
    Pin pin = nullptr;
    Unpin unpin = nullptr;
  };
  // From now on each block is pinned when it is first kept (given back within the caps) and unpinned before it is
  // freed. The first pinner installed stays (later calls change nothing).
  void set_pinner(Pinner pinner);
  // True when [p, p + bytes) lies inside one pinned block.
  bool pinned(const void* p, std::size_t bytes) const;

  BlockRecycler() = default;
  ~BlockRecycler();  // frees the kept blocks
  BlockRecycler(const BlockRecycler&) = delete;
  BlockRecycler& operator=(const BlockRecycler&) = delete;

 private:
  static std::size_t class_of(std::size_t bytes) { return (bytes + kClassBytes - 1) / kClassBytes; }
  // Frees a block, unpinning it first where it was pinned.
  void release(void* p) noexcept;
  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> kept_;  // by class; each block at least class * kClassBytes
  std::size_t blocks_ = 0, bytes_ = 0;
  Pinner pinner_;
  std::map<std::uintptr_t, std::size_t> pinned_;  // pinned blocks: start -> size
};

// A std::allocator that takes blocks of BlockRecycler::kMinBytes and more from the process's recycler.
template <class T>
struct RecyclingAllocator {
  using value_type = T;
  RecyclingAllocator() = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
    if (bytes < BlockRecycler::kMinBytes) return std::allocator<T>().allocate(n);
    return static_cast<T*>(BlockRecycler::process().take(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < BlockRecycler::kMinBytes) return std::allocator<T>().deallocate(p, n);
    BlockRecycler::process().give(p, n * sizeof(T));
  }
  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace epk
