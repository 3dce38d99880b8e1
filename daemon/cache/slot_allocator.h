// First-fit allocator of byte ranges inside one region of a pool ([base, base + capacity)). Ranges start at multiples
// of kSlotAlignment, or of a larger power of two asked for; neighbouring free ranges are merged on free.
// Single-threaded: the cache owns it (under its lane's lock).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "codec/common/result.h"

namespace epk::daemon {

inline constexpr std::uint64_t kSlotAlignment = 256;

class SlotAllocator {
 public:
  // `base` is a multiple of kSlotAlignment; the capacity is rounded down to one.
  explicit SlotAllocator(std::uint64_t capacity, std::uint64_t base = 0);

  // The aligned size a request of `bytes` occupies.
  static std::uint64_t rounded(std::uint64_t bytes);
  // Offset of the first free range of rounded(bytes) that starts at a multiple of `alignment` (a power of two, at
  // least kSlotAlignment, counted from offset 0 of the pool), or nullopt when none is large enough.
  std::optional<std::uint64_t> allocate(std::uint64_t bytes, std::uint64_t alignment = kSlotAlignment);
  // Frees a range returned by allocate(bytes).
  void free(std::uint64_t offset, std::uint64_t bytes);

  std::uint64_t base() const { return base_; }
  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used() const { return used_; }
  bool contains(std::uint64_t offset) const { return offset >= base_ && offset - base_ < capacity_; }
  // Checks that free ranges are disjoint, merged, inside the capacity and sum to capacity - used.
  Status verify() const;

 private:
  std::uint64_t base_;
  std::uint64_t capacity_;
  std::uint64_t used_ = 0;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> length
};

}  // namespace epk::daemon
