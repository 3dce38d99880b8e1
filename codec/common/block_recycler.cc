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
  return p;
}

void BlockRecycler::give(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  // A block taken from a bigger class is kept in the class it was asked for: it is at least that big.
  const std::size_t cls = class_of(bytes), size = cls * kClassBytes;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  Pinner pinner;
  bool keep = false, pin = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keep = blocks_ < kKeptBlocks && bytes_ + size <= kKeptBytes;
    if (keep) {
      ++blocks_;  // the slot, held while the block is pinned outside the lock
      bytes_ += size;
      pinner = pinner_;
      pin = pinner.pin && !pinned_.contains(a);
    }
  }
  if (!keep) return release(p);
  // Pinned when first kept, on the thread that gives it back (compress's writer, not an encoder): the block is
  // faulted in by then, and a block used once only is never pinned.
  const bool pinned_now = pin && pinner.pin(p, size);
  bool recorded = !pinned_now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      if (pinned_now) {
        pinned_.emplace(a, size);
        recorded = true;
      }
      kept_[cls].push_back(p);
      return;
    } catch (...) {
      --blocks_;
      bytes_ -= size;
    }
  }
  if (!recorded) pinner.unpin(p);
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
