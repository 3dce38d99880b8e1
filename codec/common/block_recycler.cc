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
    for (void* p : blocks) release(p);
}

void BlockRecycler::set_pinner(Pinner pinner) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pinner_.pin && pinner.pin && pinner.unpin) pinner_ = pinner;
}

bool BlockRecycler::pinned(const void* p, std::size_t bytes) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pinned_.upper_bound(a);
  if (it == pinned_.begin()) return false;
  --it;
  return a - it->first <= it->second && bytes <= it->second - (a - it->first);
}

void BlockRecycler::release(void* p) noexcept {
  Pinner::Unpin unpin = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pinned_.erase(reinterpret_cast<std::uintptr_t>(p))) unpin = pinner_.unpin;
  }
  if (unpin) unpin(p);
  std::free(p);
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
  Pinner::Pin pin = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pin = pinner_.pin;
  }
  if (pin && pin(p, size)) {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      pinned_.emplace(reinterpret_cast<std::uintptr_t>(p), size);
    } catch (...) {
      // Not recorded, so never used as pinned; unpinned now so that its free needs no record.
      pinner_.unpin(p);
    }
  }
  return p;
}

void BlockRecycler::give(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  // A block taken from a bigger class is kept in the class it was asked for: it is at least that big.
  const std::size_t cls = class_of(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (blocks_ < kKeptBlocks && bytes_ + cls * kClassBytes <= kKeptBytes) {
      bool kept = true;
      try {
        kept_[cls].push_back(p);
      } catch (...) {
        kept = false;
      }
      if (kept) {
        ++blocks_;
        bytes_ += cls * kClassBytes;
        return;
      }
    }
  }
  release(p);
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
