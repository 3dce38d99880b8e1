// The cache's per-slot release fences (daemon/cache/cache.h): a fenced slot is passed over by the LRU walk while younger
// slots go, a dropped client's fences still guard its slots, completed fences are dropped on release, and a release
// queries fences only up to the slot's oldest pending one.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "daemon/cache/cache.h"
#include "tests/daemon/cache_test_util.h"

namespace epk::daemon {
namespace {

using namespace cache_test;  // NOLINT

// A fence that counts its own destruction (the cache drops completed fences).
class CountedFence : public shm::Fence {
 public:
  CountedFence(const bool* done, int* destroyed) : done_(done), destroyed_(destroyed) {}
  ~CountedFence() override { ++*destroyed_; }
  bool completed() const override { return *done_; }

 private:
  const bool* done_;
  int* destroyed_;
};

// The per-slot fence (issue 6): an incomplete fence holds its own slot only; the LRU walk passes it and evicts the
// next oldest, and once the fence completes the slot is the first to go.
TEST(Cache, AFencedSlotIsPassedOverWhileYoungerSlotsAreEvicted) {
  Cache c(3 * kKiB);
  bool done = false;
  Slot* s0 = fill(c, 0, kKiB, 1);
  const std::uint64_t id0 = s0->id;
  ASSERT_TRUE(c.release(id0, 1, std::make_unique<PendingFence>(&done)));  // t0: the oldest, fenced
  for (std::uint32_t t = 1; t < 3; ++t) {
    Slot* s = fill(c, t, kKiB, 1);
    ASSERT_TRUE(c.release(s->id, 1, nullptr));
  }
  for (std::uint32_t t = 3; t < 7; ++t) {  // four misses in a full cache: t1, t2, t3, t4 go in turn, never t0
    Slot* s = fill(c, t, kKiB, 2);
    ASSERT_NE(s, nullptr) << "t" << t;
    ASSERT_TRUE(c.release(s->id, 2, nullptr));
    ASSERT_NE(c.find(id0), nullptr) << "the fenced slot was reused at t" << t;
    ASSERT_TRUE(c.verify());
  }
  EXPECT_EQ(c.stats().evictions, 4u);
  done = true;
  Slot* s7 = fill(c, 7, kKiB, 2);  // t0 is still the least recently used: now it goes first
  ASSERT_NE(s7, nullptr);
  EXPECT_EQ(c.find(id0), nullptr);
  EXPECT_EQ(c.acquire(key(5), kKiB, 3)->outcome, Cache::Outcome::kHit);
  EXPECT_EQ(c.acquire(key(6), kKiB, 3)->outcome, Cache::Outcome::kHit);
  EXPECT_TRUE(c.verify());
}

// A client that goes (SIGKILL, or a close while its kernels run) loses its pins, but its fences keep guarding.
TEST(Cache, ADroppedClientsFencesStillGuardItsSlots) {
  Cache c(2 * kKiB);
  bool done = false;
  Slot* s0 = fill(c, 0, kKiB, 1);
  const std::uint64_t id0 = s0->id;
  const std::uint64_t id1 = fill(c, 1, kKiB, 1)->id;
  ASSERT_TRUE(c.release(id0, 1, std::make_unique<PendingFence>(&done)));
  c.drop_client(1);  // t1's pin goes with the client, t0's fence stays
  EXPECT_EQ(c.stats().pins, 0u);
  Slot* s2 = fill(c, 2, kKiB, 2);  // evicts t1, not t0
  ASSERT_NE(s2, nullptr);
  EXPECT_EQ(c.find(id1), nullptr);
  ASSERT_NE(c.find(id0), nullptr);
  auto r = c.acquire(key(3), kKiB, 2);  // t2 pinned, t0 fenced: nothing may go
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNoSpace);
  done = true;
  EXPECT_TRUE(c.acquire(key(3), kKiB, 2));
  EXPECT_EQ(c.find(id0), nullptr);
  EXPECT_TRUE(c.verify());
}

// A slot released over and over (the cache-hit loop with event fences) holds only its fences still pending: each
// release drops the completed ones, so their markers go back to the pool.
TEST(Cache, ReleaseDropsTheSlotsCompletedFences) {
  Cache c(4 * kKiB);
  bool done_a = false, done_b = false;
  int destroyed = 0;
  Slot* s = fill(c, 0, kKiB, 1);
  ASSERT_TRUE(c.release(s->id, 1, std::make_unique<CountedFence>(&done_a, &destroyed)));
  EXPECT_EQ(c.fences_held(), 1u);
  ASSERT_EQ(c.acquire(key(0), kKiB, 1)->outcome, Cache::Outcome::kHit);
  ASSERT_TRUE(c.release(s->id, 1, std::make_unique<CountedFence>(&done_b, &destroyed)));
  EXPECT_EQ(c.fences_held(), 2u);  // both pending
  EXPECT_EQ(destroyed, 0);
  done_a = true;
  for (int i = 0; i < 5; ++i) {  // completed fences handed in are not kept at all
    ASSERT_EQ(c.acquire(key(0), kKiB, 1)->outcome, Cache::Outcome::kHit);
    ASSERT_TRUE(c.release(s->id, 1, std::make_unique<CountedFence>(&done_a, &destroyed)));
  }
  EXPECT_EQ(c.fences_held(), 1u);  // b only
  EXPECT_EQ(destroyed, 6);         // the first a, then the five completed at hand-in
  // A release the cache refuses (no pin) drops its fence too.
  EXPECT_FALSE(c.release(s->id, 9, std::make_unique<CountedFence>(&done_b, &destroyed)));
  EXPECT_EQ(destroyed, 7);
  EXPECT_EQ(c.fences_held(), 1u);
  EXPECT_TRUE(c.verify());
}

// A fence that counts the queries it answers.
class QueriedFence : public shm::Fence {
 public:
  QueriedFence(const bool* done, int* queries) : done_(done), queries_(queries) {}
  bool completed() const override {
    ++*queries_;
    return *done_;
  }

 private:
  const bool* done_;
  int* queries_;
};

// Fences are walked in release order and the walk stops at the first pending one: while the slot's oldest fence is
// pending, a release queries it alone, however many fences the slot holds.
TEST(Cache, AReleaseQueriesOnlyUpToTheSlotsOldestPendingFence) {
  Cache c(4 * kKiB);
  bool oldest_done = false, later_done = false;
  int oldest_queries = 0, later_queries = 0;
  Slot* s = fill(c, 0, kKiB, 1);
  const std::uint64_t id = s->id;
  ASSERT_TRUE(c.release(id, 1, std::make_unique<QueriedFence>(&oldest_done, &oldest_queries)));
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(c.acquire(key(0), kKiB, 1)->outcome, Cache::Outcome::kHit);
    ASSERT_TRUE(c.release(id, 1, std::make_unique<QueriedFence>(&later_done, &later_queries)));
  }
  EXPECT_EQ(c.fences_held(), 21u);
  EXPECT_EQ(later_queries, 20);   // each once, when handed in
  EXPECT_EQ(oldest_queries, 21);  // at hand-in, then once per later release
  later_done = true;              // the later ones are over, the oldest is not: the slot stays held
  auto r = c.acquire(key(1), 4 * kKiB, 2);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNoSpace);
  EXPECT_EQ(later_queries, 20);  // the eviction walk stopped at the oldest too
  oldest_done = true;
  EXPECT_TRUE(c.acquire(key(1), 4 * kKiB, 2));  // every fence complete: the slot goes
  EXPECT_EQ(c.find(id), nullptr);
  EXPECT_EQ(c.fences_held(), 0u);
  EXPECT_TRUE(c.verify());
}

}  // namespace
}  // namespace epk::daemon
