// First-fit allocator of byte ranges inside one pool. Ranges are aligned to kSlotAlignment; neighbouring free ranges
// are merged on free. Single-threaded: the cache (on the server thread) owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "codec/common/result.h"

namespace epk::daemon {

inline constexpr std::uint64_t kSlotAlignment = 256;

class SlotAllocator {
 public:
  explicit SlotAllocator(std::uint64_t capacity);

  // The aligned size a request of `bytes` occupies.
  static std::uint64_t rounded(std::uint64_t bytes);
  // Offset of a free range of rounded(bytes), or nullopt when no single free range is large enough.
  std::optional<std::uint64_t> allocate(std::uint64_t bytes);
  // Frees a range returned by allocate(bytes).
  void free(std::uint64_t offset, std::uint64_t bytes);

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used() const { return used_; }
  // Checks that free ranges are disjoint, merged, inside the capacity and sum to capacity - used.
  Status verify() const;

 private:
  std::uint64_t capacity_;
  std::uint64_t used_ = 0;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> length
};

}  // namespace epk::daemon
