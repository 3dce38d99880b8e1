#include "codec/common/block_recycler.h"

#include <cstdlib>

#include "codec/common/huge_pages.h"

namespace epk {

BlockRecycler& BlockRecycler::process() {
  static BlockRecycler* const r = new BlockRecycler();
  return *r;
}

BlockRecycler::~BlockRecycler() {
  for (auto& [cls, blocks] : kept_)
    for (void* p : blocks) std::free(p);
}

void* BlockRecycler::take(std::size_t bytes) {
  const std::size_t cls = class_of(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = kept_.lower_bound(cls); it != kept_.end() && it->first <= cls + kBiggerClasses; ++it) {
      if (it->second.empty()) continue;
      void* p = it->second.back();
      it->second.pop_back();
      --blocks_;
      bytes_ -= it->first * kClassBytes;
      return p;
    }
  }
  // A fresh block of the whole class, so that it serves any later request of its class.
  const std::size_t size = cls * kClassBytes;
  void* p = std::malloc(size);
  if (p == nullptr) throw std::bad_alloc();
  advise_huge_pages(p, size);
  return p;
}

void BlockRecycler::give(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  // A block taken from a bigger class is kept in the class it was asked for: it is at least that big.
  const std::size_t cls = class_of(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (blocks_ < kKeptBlocks && bytes_ + cls * kClassBytes <= kKeptBytes) {
      try {
        kept_[cls].push_back(p);
      } catch (...) {
        std::free(p);
        return;
      }
      ++blocks_;
      bytes_ += cls * kClassBytes;
      return;
    }
  }
  std::free(p);
}

std::size_t BlockRecycler::kept_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_;
}

std::size_t BlockRecycler::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace epk
