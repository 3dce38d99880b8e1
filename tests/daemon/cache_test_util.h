// Helpers of the cache's tests (cache_test.cc, cache_fence_test.cc): keys, a filled slot, a fence completed by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "daemon/cache/cache.h"
#include "shm/fence.h"

namespace epk::daemon::cache_test {

inline constexpr std::uint64_t kKiB = 1024;

inline SlotKey key(std::uint32_t t) { return {0, t, shm::Layout::kStored}; }

// Acquires and marks decoded: the usual miss path.
inline Slot* fill(Cache& c, std::uint32_t t, std::uint64_t bytes, ClientId client) {
  auto r = c.acquire(key(t), bytes, client);
  EXPECT_TRUE(r) << r.error().to_string();
  if (!r) return nullptr;
  if (r->outcome == Cache::Outcome::kMiss) c.decoded(r->slot->id, true);
  return r->slot;
}

class PendingFence : public shm::Fence {
 public:
  explicit PendingFence(const bool* done) : done_(done) {}
  bool completed() const override { return *done_; }

 private:
  const bool* done_;
};

}  // namespace epk::daemon::cache_test
