#include "daemon/cache/cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "tests/daemon/cache_test_util.h"

namespace epk::daemon {
namespace {

using namespace cache_test;  // NOLINT

TEST(Cache, MissThenHitPinsAndCounts) {
  Cache c(64 * kKiB);
  auto a = c.acquire(key(1), 1000, 7);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->outcome, Cache::Outcome::kMiss);
  EXPECT_EQ(a->slot->state, SlotState::kDecoding);
  auto b = c.acquire(key(1), 1000, 8);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->outcome, Cache::Outcome::kPending);  // joins the decode in flight: decoded once
  EXPECT_EQ(b->slot->id, a->slot->id);
  c.decoded(a->slot->id, true);
  auto h = c.acquire(key(1), 1000, 7);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->outcome, Cache::Outcome::kHit);
  CacheStats s = c.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.pins, 3u);
  EXPECT_EQ(s.pinned_slots, 1u);
  EXPECT_TRUE(c.verify());
}

// The hit-only lookup epkd runs under its lane lock: it pins a ready slot like acquire() does (its caller counts the
// hit), and leaves an absent or decoding slot untouched for acquire() to handle.
TEST(Cache, AcquireReadyPinsOnlyReadySlots) {
  Cache c(64 * kKiB);
  EXPECT_EQ(c.acquire_ready(key(3), 7), nullptr);  // absent: nothing reserved
  EXPECT_EQ(c.stats().slots, 0u);
  auto a = c.acquire(key(3), 1000, 7);
  ASSERT_TRUE(a);
  EXPECT_EQ(c.acquire_ready(key(3), 8), nullptr);  // still decoding: no pin, no count
  EXPECT_EQ(a->slot->pins_of(8), 0u);
  EXPECT_EQ(c.stats().hits, 0u);
  EXPECT_EQ(c.stats().misses, 1u);
  c.decoded(a->slot->id, true);
  ASSERT_TRUE(c.release(a->slot->id, 7, nullptr));  // unpinned and ready: in the LRU list
  Slot* h = c.acquire_ready(key(3), 8);
  ASSERT_EQ(h, a->slot);
  EXPECT_EQ(h->pins_of(8), 1u);
  CacheStats s = c.stats();
  EXPECT_EQ(s.hits, 0u);  // counted by the caller
  EXPECT_EQ(s.pins, 1u);
  EXPECT_TRUE(c.verify());  // left the LRU list while pinned
  ASSERT_TRUE(c.release(h->id, 8, nullptr));
  EXPECT_TRUE(c.verify());
}

// The shared-lock path moves pins only between totals above zero, and only on entries that exist: a first pin, a
// pin of an unpinned slot (it would leave the LRU list) and the last unpin (it would join it) go to the exclusive path.
TEST(Cache, SharedPinsStayAboveZeroAndNeedAnEntry) {
  Cache c(64 * kKiB);
  Slot* s = fill(c, 4, 1000, 7);  // client 7 pinned once
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(c.pin_shared(key(4), 8), nullptr);  // client 8 has no entry yet
  EXPECT_EQ(c.pin_shared(key(5), 7), nullptr);  // no such slot
  EXPECT_EQ(c.pin_shared(key(4), 7), s);        // total 1 -> 2
  EXPECT_EQ(s->pins_of(7), 2u);
  EXPECT_TRUE(c.unpin_shared(s->id, 7));        // 2 -> 1
  EXPECT_FALSE(c.unpin_shared(s->id, 7));       // 1 -> 0 would put it in the LRU list
  EXPECT_EQ(s->pin_total.load(), 1u);
  EXPECT_FALSE(c.unpin_shared(s->id, 8));       // not pinned by 8
  EXPECT_FALSE(c.unpin_shared(s->id + 99, 7));  // no such slot
  EXPECT_TRUE(c.verify());
  ASSERT_TRUE(c.release(s->id, 7, nullptr));
  EXPECT_EQ(c.pin_shared(key(4), 7), nullptr);  // total 0: in the LRU list
  EXPECT_TRUE(c.verify());
  auto d = c.acquire(key(6), 1000, 7);  // decoding: never pinned on the shared path
  ASSERT_TRUE(d);
  ASSERT_TRUE(c.acquire(key(6), 1000, 8));
  EXPECT_EQ(c.pin_shared(key(6), 7), nullptr);
  EXPECT_EQ(d->slot->pin_total.load(), 2u);
}

// Clients on several threads pin and unpin one slot on the shared path while a client holds it (the lane lock's
// readers run side by side): the total comes back exact.
TEST(Cache, SharedPinsFromManyThreadsBalance) {
  Cache c(64 * kKiB);
  constexpr int kThreads = 5, kIters = 20011;
  Slot* s = fill(c, 1, 1000, 100);  // the holder
  ASSERT_NE(s, nullptr);
  for (ClientId t = 0; t < kThreads; ++t) {  // each client's entry exists (first pins are exclusive)
    ASSERT_TRUE(c.acquire(key(1), 1000, t + 1));
    ASSERT_TRUE(c.release(s->id, t + 1, nullptr));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (ClientId t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        if (c.pin_shared(key(1), t + 1) != s || !c.unpin_shared(s->id, t + 1)) bad.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(s->pin_total.load(), 1u);
  EXPECT_TRUE(c.verify());
}

TEST(Cache, LeastRecentlyUsedUnpinnedSlotIsEvictedFirst) {
  Cache c(3 * kKiB);
  for (std::uint32_t t = 0; t < 3; ++t) {
    Slot* s = fill(c, t, kKiB, 1);
    ASSERT_TRUE(c.release(s->id, 1, nullptr));
  }
  // Touch t0 so that t1 becomes the oldest.
  Slot* s0 = fill(c, 0, kKiB, 1);
  ASSERT_TRUE(c.release(s0->id, 1, nullptr));
  Slot* s3 = fill(c, 3, kKiB, 1);
  ASSERT_TRUE(c.release(s3->id, 1, nullptr));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.acquire(key(0), kKiB, 2)->outcome, Cache::Outcome::kHit);
  EXPECT_EQ(c.acquire(key(2), kKiB, 2)->outcome, Cache::Outcome::kHit);
  EXPECT_EQ(c.acquire(key(1), kKiB, 3)->outcome, Cache::Outcome::kMiss);  // t1 was the one evicted
  EXPECT_TRUE(c.verify());
}

TEST(Cache, PinnedSlotsAreNeverEvictedAndAFullCacheSaysNoSpace) {
  Cache c(2 * kKiB);
  fill(c, 0, kKiB, 1);
  fill(c, 1, kKiB, 2);
  auto r = c.acquire(key(2), 1, 3);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNoSpace);
  EXPECT_EQ(c.stats().evictions, 0u);
  EXPECT_EQ(c.acquire(key(0), kKiB, 3)->outcome, Cache::Outcome::kHit);
  EXPECT_TRUE(c.verify());
}

TEST(Cache, DecodingSlotsAreNeverEvicted) {
  Cache c(2 * kKiB);
  auto pre = c.acquire(key(0), 2 * kKiB, kNoClient);  // a prefetch: no pin, still decoding
  ASSERT_TRUE(pre);
  EXPECT_EQ(c.stats().pins, 0u);
  EXPECT_FALSE(c.acquire(key(1), kKiB, 1));
  c.decoded(pre->slot->id, true);
  EXPECT_TRUE(c.acquire(key(1), kKiB, 1));  // now the ready, unpinned prefetch can go
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_TRUE(c.verify());
}

TEST(Cache, RequestLargerThanTheBudgetIsRefused) {
  Cache c(4 * kKiB);
  auto r = c.acquire(key(0), 4 * kKiB + 1, 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNoSpace);
  EXPECT_TRUE(c.acquire(key(0), 4 * kKiB, 1));
}

TEST(Cache, PinsAreCountedPerClient) {
  Cache c(8 * kKiB);
  Slot* s = fill(c, 0, kKiB, 1);
  fill(c, 0, kKiB, 1);
  fill(c, 0, kKiB, 2);
  EXPECT_EQ(s->pin_total, 3u);
  EXPECT_EQ(s->pins.at(1), 2u);
  ASSERT_TRUE(c.release(s->id, 1, nullptr));
  ASSERT_TRUE(c.release(s->id, 1, nullptr));
  auto again = c.release(s->id, 1, nullptr);  // client 1 holds no more pins
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(s->pin_total, 1u);
  EXPECT_FALSE(c.release(s->id, 3, nullptr));  // never pinned by client 3
  EXPECT_FALSE(c.release(999, 2, nullptr));
  EXPECT_TRUE(c.verify());
}

TEST(Cache, DroppedClientLosesEveryPin) {
  Cache c(4 * kKiB);
  fill(c, 0, kKiB, 1);
  fill(c, 0, kKiB, 1);
  fill(c, 1, kKiB, 1);
  Slot* other = fill(c, 2, kKiB, 2);
  auto decoding = c.acquire(key(3), kKiB, 1);
  ASSERT_TRUE(decoding);
  c.drop_client(1);
  CacheStats s = c.stats();
  EXPECT_EQ(s.pins, 1u);
  EXPECT_EQ(other->pin_total, 1u);
  EXPECT_TRUE(c.verify());
  c.decoded(decoding->slot->id, true);  // finished after its client left: unpinned, evictable
  EXPECT_TRUE(c.verify());
  for (std::uint32_t t = 10; t < 13; ++t) fill(c, t, kKiB, 3);
  EXPECT_EQ(c.stats().evictions, 3u);
  EXPECT_EQ(c.acquire(key(2), kKiB, 3)->outcome, Cache::Outcome::kHit);
}

TEST(Cache, FailedDecodeRemovesTheSlotAndItsPins) {
  Cache c(4 * kKiB);
  auto a = c.acquire(key(0), kKiB, 1);
  auto b = c.acquire(key(0), kKiB, 2);
  ASSERT_TRUE(a && b);
  const std::uint64_t id = a->slot->id;
  c.decoded(id, false);
  EXPECT_EQ(c.find(id), nullptr);
  CacheStats s = c.stats();
  EXPECT_EQ(s.pins, 0u);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_TRUE(c.verify());
}

// Early replies (protocol version 4) let a client release a slot before its decode finished: it must not become
// evictable (its bytes are still being written) until it is marked ready.
TEST(Cache, ASlotReleasedWhileDecodingIsEvictableOnlyOnceReady) {
  Cache c(kKiB);
  auto a = c.acquire(key(0), kKiB, 1);
  ASSERT_TRUE(a);
  const std::uint64_t id = a->slot->id;
  ASSERT_TRUE(c.release(id, 1, nullptr));
  EXPECT_TRUE(c.verify());
  auto b = c.acquire(key(1), kKiB, 2);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ErrorCode::kNoSpace);
  c.decoded(id, true);
  EXPECT_TRUE(c.verify());
  b = c.acquire(key(1), kKiB, 2);
  ASSERT_TRUE(b);
  EXPECT_EQ(c.find(id), nullptr);
  EXPECT_EQ(c.stats().evictions, 1u);
}

TEST(Cache, ASlotReleasedWhileDecodingThatFailsIsRemoved) {
  Cache c(4 * kKiB);
  auto a = c.acquire(key(0), kKiB, 1);
  ASSERT_TRUE(a);
  const std::uint64_t id = a->slot->id;
  ASSERT_TRUE(c.release(id, 1, nullptr));
  c.decoded(id, false);
  EXPECT_EQ(c.find(id), nullptr);
  EXPECT_EQ(c.stats().used_bytes, 0u);
  EXPECT_FALSE(c.release(id, 1, nullptr));
  EXPECT_TRUE(c.verify());
}

TEST(Cache, SlotWithAnIncompleteFenceIsNotReused) {
  Cache c(kKiB);
  bool done = false;
  Slot* s = fill(c, 0, kKiB, 1);
  ASSERT_TRUE(c.release(s->id, 1, std::make_unique<PendingFence>(&done)));
  auto r = c.acquire(key(1), kKiB, 2);
  ASSERT_FALSE(r);  // t0 is unpinned but its last user may still read it
  EXPECT_EQ(r.error().code, ErrorCode::kNoSpace);
  done = true;
  EXPECT_TRUE(c.acquire(key(1), kKiB, 2));
  EXPECT_EQ(c.stats().evictions, 1u);
}

// A model retired at a reload: its slots go as soon as nothing holds them (no pin, decoded, fences complete); the
// other models' slots are untouched, and the dropped ones are not evictions.
TEST(Cache, DropModelRemovesOnlyItsSlotsThatNothingHolds) {
  Cache c(64 * kKiB);
  auto of = [](std::uint32_t model, std::uint32_t t) { return SlotKey{model, t, shm::Layout::kStored}; };
  auto ready = [&](std::uint32_t model, std::uint32_t t, ClientId client) {
    auto r = c.acquire(of(model, t), kKiB, client);
    EXPECT_TRUE(r);
    c.decoded(r->slot->id, true);
    return r->slot->id;
  };
  bool done = false;
  const std::uint64_t pinned = ready(3, 0, 1);
  const std::uint64_t fenced = ready(3, 1, 1);
  ASSERT_TRUE(c.release(fenced, 1, std::make_unique<PendingFence>(&done)));
  const std::uint64_t idle = ready(3, 2, 1);
  ASSERT_TRUE(c.release(idle, 1, nullptr));
  auto decoding = c.acquire(of(3, 3), kKiB, kNoClient);  // a prefetch in flight
  ASSERT_TRUE(decoding);
  const std::uint64_t other = ready(4, 0, 1);
  ASSERT_TRUE(c.release(other, 1, nullptr));
  EXPECT_EQ(c.drop_model(3), 3u);  // pinned, fenced, decoding
  EXPECT_EQ(c.find(idle), nullptr);
  EXPECT_NE(c.find(pinned), nullptr);
  EXPECT_NE(c.find(other), nullptr);
  EXPECT_TRUE(c.verify());
  done = true;
  c.decoded(decoding->slot->id, true);
  EXPECT_EQ(c.drop_model(3), 1u);  // the pinned one
  ASSERT_TRUE(c.release(pinned, 1, nullptr));
  EXPECT_EQ(c.drop_model(3), 0u);
  EXPECT_EQ(c.stats().slots, 1u);
  EXPECT_EQ(c.stats().evictions, 0u);
  EXPECT_EQ(c.pinned_bytes_of(1), 0u);
  EXPECT_TRUE(c.verify());
}

// What an acquire refused for space may wait for (issue 19): a fenced slot's bytes come free by themselves, and the
// report says so with the numbers; once the fence completes the same acquire fits.
TEST(Cache, ARefusalBehindAPendingFenceCanWaitAndFitsOnceItCompletes) {
  Cache c(2 * kKiB);
  bool done = false;
  Slot* held = fill(c, 0, kKiB, 1);  // stays pinned
  Slot* fenced = fill(c, 1, kKiB, 1);
  ASSERT_TRUE(held && fenced);
  ASSERT_TRUE(c.release(fenced->id, 1, std::make_unique<PendingFence>(&done)));
  EXPECT_EQ(c.stats().fenced_bytes, kKiB);
  ASSERT_FALSE(c.acquire(key(2), kKiB, 2));
  const SpaceReport r = c.space_report(kKiB);
  EXPECT_EQ(r.pinned, kKiB);
  EXPECT_EQ(r.fenced, kKiB);
  EXPECT_EQ(r.fenced_slots, 1u);
  EXPECT_EQ(r.largest_gap, kKiB);
  EXPECT_TRUE(r.can_wait());
  EXPECT_NE(r.describe().find("1 pending fence"), std::string::npos) << r.describe();
  done = true;
  EXPECT_TRUE(c.acquire(key(2), kKiB, 2));
  EXPECT_EQ(c.stats().fenced_bytes, 0u);
  EXPECT_TRUE(c.verify());
}

TEST(Cache, PinnedBytesPlusTheRequestOverTheBudgetCannotWait) {
  Cache c(2 * kKiB);
  bool done = false;
  ASSERT_TRUE(fill(c, 0, kKiB, 1));
  Slot* fenced = fill(c, 1, kKiB, 1);
  ASSERT_TRUE(c.release(fenced->id, 1, std::make_unique<PendingFence>(&done)));
  ASSERT_FALSE(c.acquire(key(2), 2 * kKiB, 2));
  const SpaceReport r = c.space_report(2 * kKiB);
  EXPECT_FALSE(r.can_wait());
  EXPECT_NE(r.describe().find("pinned bytes plus the request exceed the budget"), std::string::npos) << r.describe();
}

// Pinned slots that split the pool: enough bytes are free in all, but no range is large enough, and the refusal
// says so (waiting would not help).
TEST(Cache, PinnedSlotsThatSplitThePoolAreNamedInTheRefusal) {
  Cache c(4 * kKiB);
  Slot* s0 = fill(c, 0, kKiB, 1);
  ASSERT_TRUE(fill(c, 1, kKiB, 1));
  Slot* s2 = fill(c, 2, kKiB, 1);
  ASSERT_TRUE(fill(c, 3, kKiB, 1));
  ASSERT_TRUE(c.release(s0->id, 1, nullptr));
  ASSERT_TRUE(c.release(s2->id, 1, nullptr));
  auto refused = c.acquire(key(9), 2 * kKiB, 2);  // both free KiBs are evicted first; still no 2 KiB range
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("no free range that large (the largest is 1024 bytes)"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(c.space_report(2 * kKiB).can_wait());
}

// A slot a prefetch made (no client) counts as prefetched until some client acquires it; while it decodes, an
// acquire refused for its space can wait.
TEST(Cache, PrefetchedSlotsAreCountedUntilAcquiredAndTheirDecodeCanBeWaitedFor) {
  Cache c(kKiB);
  auto p = c.acquire(key(0), kKiB, kNoClient);
  ASSERT_TRUE(p);
  EXPECT_EQ(c.stats().prefetched_bytes, kKiB);
  ASSERT_FALSE(c.acquire(key(1), kKiB, 1));
  const SpaceReport r = c.space_report(kKiB);
  EXPECT_EQ(r.decoding, kKiB);
  EXPECT_TRUE(r.can_wait());
  c.decoded(p->slot->id, true);
  EXPECT_EQ(c.stats().prefetched_bytes, kKiB);
  ASSERT_TRUE(c.acquire(key(0), kKiB, 1));  // now acquired: no longer an unused prefetch
  EXPECT_EQ(c.stats().prefetched_bytes, 0u);
  EXPECT_TRUE(c.verify());
}

// Issue 17's quotas: one client's pinned bytes (a slot counts once) and pins per slot, on the exclusive and the
// shared-lock paths; the other clients keep their share.
TEST(Cache, AClientOverItsQuotaIsRefusedAndOthersKeepTheirShare) {
  Cache c(8 * kKiB);
  c.set_quota({2 * kKiB, 3});
  ASSERT_TRUE(fill(c, 0, kKiB, 1));
  ASSERT_TRUE(fill(c, 1, kKiB, 1));
  EXPECT_EQ(c.pinned_bytes_of(1), 2 * kKiB);
  auto over = c.acquire(key(2), kKiB, 1);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kQuota);
  EXPECT_NE(over.error().message.find("quota_pinned_mb"), std::string::npos) << over.error().message;
  Slot* other = fill(c, 2, kKiB, 2);  // another client: its own quota
  ASSERT_TRUE(other);
  auto again = c.acquire(key(0), kKiB, 1);  // a slot it holds already counts once
  ASSERT_TRUE(again);
  EXPECT_EQ(c.pinned_bytes_of(1), 2 * kKiB);
  ASSERT_TRUE(c.acquire(key(0), kKiB, 1));  // its third pin of t0
  auto fourth = c.acquire(key(0), kKiB, 1);
  ASSERT_FALSE(fourth);
  EXPECT_NE(fourth.error().message.find("max_pins_per_tensor = 3"), std::string::npos) << fourth.error().message;
  EXPECT_EQ(c.acquire_ready(key(0), 1), nullptr);  // the hit path refuses it too (acquire() says why)
  EXPECT_TRUE(c.verify());
  // Release t1: its bytes leave the client's count and t2 fits its quota (t2 is pinned by client 2: the shared path).
  const std::uint64_t t1 = c.acquire(key(1), kKiB, 1)->slot->id;
  ASSERT_TRUE(c.release(t1, 1, nullptr));
  ASSERT_TRUE(c.release(t1, 1, nullptr));
  EXPECT_EQ(c.pinned_bytes_of(1), kKiB);
  ASSERT_TRUE(c.acquire(key(2), kKiB, 1));  // first pin of t2 by client 1: exclusive, within the quota
  const std::uint64_t t2 = other->id;
  ASSERT_TRUE(c.unpin_shared(t2, 1));  // back to 0 for client 1 while client 2 keeps the slot pinned
  EXPECT_EQ(c.pinned_bytes_of(1), kKiB);
  EXPECT_NE(c.pin_shared(key(2), 1), nullptr);  // 0 -> 1 on the shared path: counted again
  EXPECT_EQ(c.pinned_bytes_of(1), 2 * kKiB);
  EXPECT_TRUE(c.verify());
  ASSERT_TRUE(c.unpin_shared(t2, 1));
  ASSERT_TRUE(fill(c, 3, kKiB, 1));  // its second KiB again
  EXPECT_EQ(c.pin_shared(key(2), 1), nullptr) << "the shared path let a client past its byte quota";
  EXPECT_TRUE(c.verify());
  c.drop_client(1);
  EXPECT_EQ(c.pinned_bytes_of(1), 0u);
  EXPECT_TRUE(c.verify());
}

TEST(Cache, EvictedRangesAreDiscarded) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> discarded;
  Cache c(
      kKiB,
      [](void* ctx, std::uint64_t off, std::uint64_t len) {
        static_cast<std::vector<std::pair<std::uint64_t, std::uint64_t>>*>(ctx)->emplace_back(off, len);
      },
      &discarded);
  Slot* s = fill(c, 0, 700, 1);
  ASSERT_TRUE(c.release(s->id, 1, nullptr));
  fill(c, 1, 900, 1);
  ASSERT_EQ(discarded.size(), 1u);
  EXPECT_EQ(discarded[0].first, 0u);
  EXPECT_EQ(discarded[0].second, SlotAllocator::rounded(700));
}

// Random acquire / release / decode / drop sequences: the budget and every index stay consistent after each step.
TEST(Cache, BudgetInvariantHoldsUnderRandomTraffic) {
  std::mt19937_64 rng(20261130);
  const std::uint64_t budget = 37 * kKiB + 300;
  Cache c(budget);
  std::vector<std::pair<std::uint64_t, ClientId>> held;
  std::vector<std::uint64_t> decoding;
  int no_space = 0;
  for (int step = 0; step < 20000; ++step) {
    int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      auto t = static_cast<std::uint32_t>(rng() % 60);
      std::uint64_t bytes = 1 + (std::uint64_t{t} * 977) % (6 * kKiB);  // a tensor has one size
      ClientId client = (rng() % 8 == 0) ? kNoClient : 1 + rng() % 6;
      auto r = c.acquire(key(t), bytes, client);
      if (!r) {
        ASSERT_EQ(r.error().code, ErrorCode::kNoSpace);
        ++no_space;
      } else {
        if (r->outcome == Cache::Outcome::kMiss) decoding.push_back(r->slot->id);
        if (client != kNoClient) held.emplace_back(r->slot->id, client);
      }
    } else if (op < 8 && !held.empty()) {
      std::size_t i = rng() % held.size();
      Status st = c.release(held[i].first, held[i].second, nullptr);
      // A failed decode removes the slot together with its pins.
      if (!st) {
        ASSERT_EQ(c.find(held[i].first), nullptr);
      }
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op < 9 && !decoding.empty()) {
      std::size_t i = rng() % decoding.size();
      c.decoded(decoding[i], rng() % 20 != 0);
      decoding.erase(decoding.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ClientId gone = 1 + rng() % 6;
      c.drop_client(gone);
      std::erase_if(held, [&](const auto& h) { return h.second == gone; });
    }
    Status v = c.verify();
    ASSERT_TRUE(v) << "step " << step << ": " << v.error().to_string();
    ASSERT_LE(c.stats().used_bytes, budget);
  }
  EXPECT_GT(c.stats().evictions, 100u);
  EXPECT_GT(no_space, 0);
}

}  // namespace
}  // namespace epk::daemon
