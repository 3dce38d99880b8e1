#include "daemon/cache/fence_pool.h"

#include <spdlog/spdlog.h>

namespace epk::daemon {

std::shared_ptr<FencePool> FencePool::create(std::unique_ptr<MarkerSource> source, std::size_t capacity,
                                             std::string what) {
  return std::shared_ptr<FencePool>(new FencePool(std::move(source), capacity, std::move(what)));
}

std::size_t FencePool::made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

MarkerState FencePool::query_locked(std::size_t index) {
  MarkerState st = source_->query(index);
  if (st == MarkerState::kFailed && !entries_[index].failure_logged) {
    entries_[index].failure_logged = true;
    // Never read as complete: the slot it guards stays unused (its bytes held) rather than reused while a client
    // kernel may still read it.
    spdlog::error("{}: a release fence's event query failed ({}); its slot is held, not reused", what_,
                  source_->last_error());
  }
  return st;
}

Result<std::unique_ptr<FencePool::Fence>> FencePool::take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t index = entries_.size();
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else if (entries_.size() < capacity_) {
    EPK_TRY(source_->make(index));
    entries_.emplace_back();
  } else {
    // Every marker is held. Fences the cache has not looked at since their work completed still hold theirs: reclaim
    // one (its Fence then reads complete through the generation).
    for (std::size_t i = 0; i < entries_.size() && index == entries_.size(); ++i) {
      if (entries_[i].held && entries_[i].armed && query_locked(i) == MarkerState::kDone) {
        ++entries_[i].generation;
        entries_[i].held = entries_[i].armed = false;
        index = i;
      }
    }
    if (index == entries_.size()) {
      return make_error(ErrorCode::kNoSpace, "release: " + what_ + " has " + std::to_string(capacity_) +
                                                 " release fences outstanding (clients' kernels not finished); retry "
                                                 "later or synchronise and release with a host fence");
    }
  }
  Entry& e = entries_[index];
  e.held = true;
  e.armed = false;
  e.failure_logged = false;
  return std::make_unique<Fence>(shared_from_this(), index, e.generation);
}

bool FencePool::completed(std::size_t index, std::uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = entries_[index];
  if (e.generation != generation) return true;  // reclaimed, which only a completed marker is
  return e.armed && query_locked(index) == MarkerState::kDone;
}

void FencePool::arm(std::size_t index, std::uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_[index].generation == generation) entries_[index].armed = true;
}

void FencePool::give_back(std::size_t index, std::uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[index];
  if (e.generation != generation) return;  // reclaimed already (and perhaps held by another fence)
  ++e.generation;
  e.held = e.armed = false;
  free_.push_back(index);
}

std::size_t FencePool::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].held && entries_[i].armed && query_locked(i) != MarkerState::kDone) ++n;
  }
  return n;
}

}  // namespace epk::daemon
