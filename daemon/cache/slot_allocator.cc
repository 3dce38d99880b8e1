#include "daemon/cache/slot_allocator.h"

#include <algorithm>
#include <string>

#include "codec/common/bytes.h"

namespace epk::daemon {

SlotAllocator::SlotAllocator(std::uint64_t capacity, std::uint64_t base)
    : base_(base), capacity_(capacity / kSlotAlignment * kSlotAlignment) {
  if (capacity_ > 0) free_.emplace(base_, capacity_);
}

std::uint64_t SlotAllocator::rounded(std::uint64_t bytes) {
  return bytes == 0 ? kSlotAlignment : align_up(bytes, kSlotAlignment);
}

std::optional<std::uint64_t> SlotAllocator::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  if (bytes > capacity_) return std::nullopt;
  const std::uint64_t need = rounded(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::uint64_t start = it->first, end = it->first + it->second;
    const std::uint64_t offset = align_up(start, alignment);
    if (offset + need > end) continue;
    free_.erase(it);
    if (offset > start) free_.emplace(start, offset - start);
    if (end > offset + need) free_.emplace(offset + need, end - offset - need);
    used_ += need;
    return offset;
  }
  return std::nullopt;
}

void SlotAllocator::free(std::uint64_t offset, std::uint64_t bytes) {
  std::uint64_t len = rounded(bytes);
  used_ -= len;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += len;
      return;
    }
  }
  free_.emplace(offset, len);
}

Status SlotAllocator::verify() const {
  std::uint64_t free_sum = 0;
  std::uint64_t end = 0;
  bool first = true;
  for (const auto& [off, len] : free_) {
    if (len == 0 || off % kSlotAlignment != 0 || len % kSlotAlignment != 0) {
      return make_error(ErrorCode::kInternal,
                        "slot allocator: misaligned or empty free range at " + std::to_string(off));
    }
    if (!first && off <= end) {
      return make_error(ErrorCode::kInternal,
                        "slot allocator: free ranges overlap or are not merged at " + std::to_string(off));
    }
    if (off < base_ || off + len > base_ + capacity_) {
      return make_error(ErrorCode::kInternal, "slot allocator: free range outside its region");
    }
    end = off + len;
    free_sum += len;
    first = false;
  }
  if (free_sum + used_ != capacity_) {
    return make_error(ErrorCode::kInternal, "slot allocator: free " + std::to_string(free_sum) + " + used " +
                                                std::to_string(used_) + " != capacity " + std::to_string(capacity_));
  }
  return {};
}

}  // namespace epk::daemon
