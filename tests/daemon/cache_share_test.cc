// The cache's fair shares (daemon/cache/cache.h): a uid's pinned bytes are capped over all its sessions (root and the owner
// uncapped), small slots live in the arena and cannot split the main region, each pinned slot counts at least
// kSmallSlotMax against the share, and the slot count is bounded.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "daemon/cache/cache.h"

namespace epk::daemon {
namespace {

constexpr std::uint64_t kMiB = 1u << 20;
constexpr uid_t kAlice = 1001, kBob = 1002, kOwner = 1003;

SlotKey key(std::uint32_t t) { return {0, t, shm::Layout::kStored}; }

ClientQuota shares(double share, std::uint64_t max_slots = 0) {
  ClientQuota q;
  q.uid_share = share;
  q.owner_uid = kOwner;
  q.max_slots = max_slots;
  return q;
}

Result<Slot*> fill(Cache& c, std::uint32_t t, std::uint64_t bytes, ClientId client, uid_t uid) {
  EPK_TRY_ASSIGN(auto r, c.acquire(key(t), bytes, client, uid));
  if (r.outcome == Cache::Outcome::kMiss) c.decoded(r.slot->id, true);
  return r.slot;
}

// One uid with many sessions, each far under any per-session quota, stops at its share; the other uid still gets the
// rest of the budget. Root and epkd's own uid are not capped.
TEST(CacheShares, AUidIsCappedOverAllItsSessions) {
  Cache c(32 * kMiB);
  c.set_quota(shares(0.5));
  std::uint32_t t = 0;
  std::uint64_t pinned = 0;
  for (ClientId client = 1; client <= 64; ++client) {
    for (int i = 0; i < 4; ++i) {
      auto s = fill(c, t++, kMiB / 4, client, kAlice);
      if (!s) {
        EXPECT_EQ(s.error().code, ErrorCode::kQuota);
        EXPECT_NE(s.error().message.find("uid 1001"), std::string::npos) << s.error().message;
        EXPECT_NE(s.error().message.find("uid_pinned_percent"), std::string::npos) << s.error().message;
        goto capped;
      }
      pinned += kMiB / 4;
    }
  }
capped:
  EXPECT_EQ(pinned, 16 * kMiB);
  EXPECT_EQ(c.pinned_bytes_of_uid(kAlice), 16 * kMiB);
  ASSERT_TRUE(c.verify()) << c.verify().error().to_string();
  // Bob gets 8 MiB in one piece beside Alice's pins (the rest of the main region).
  auto b = fill(c, 100000, 8 * kMiB, 1000, kBob);
  ASSERT_TRUE(b) << b.error().to_string();
  // Alice's sessions going (or releasing) gives her share back.
  for (ClientId client = 1; client <= 64; ++client) c.drop_client(client);
  EXPECT_EQ(c.pinned_bytes_of_uid(kAlice), 0u);
  EXPECT_TRUE(fill(c, t++, kMiB, 1, kAlice));
  // Root and the owner take more than a share.
  Cache d(32 * kMiB);
  d.set_quota(shares(0.25));
  for (uid_t uid : {uid_t(0), kOwner}) {
    for (std::uint32_t i = 0; i < 12; ++i)
      ASSERT_TRUE(fill(d, uid * 100 + i, kMiB, ClientId(uid + 1), uid)) << uid << " " << i;
  }
  EXPECT_TRUE(d.verify());
}

// A small pinned slot counts kSmallSlotMax against the share, so pins cannot be spread thin to cover the pool.
TEST(CacheShares, ASmallPinCountsTheLeastBlockItKeeps) {
  Cache c(32 * kMiB);
  c.set_quota(shares(0.5));
  std::uint32_t n = 0;
  while (fill(c, n, 256, 1, kAlice)) ++n;
  EXPECT_EQ(n, 16 * kMiB / kSmallSlotMax);
  EXPECT_EQ(c.pinned_bytes_of_uid(kAlice), 16 * kMiB);
  EXPECT_TRUE(c.verify());
}

// The fragmentation attack: tiny slots filled, released, and every 32nd kept pinned. In the arena they leave the main
// region whole: another client's large tensor still fits.
TEST(CacheShares, SmallPinnedSlotsDoNotSplitTheMainRegion) {
  Cache c(32 * kMiB);
  c.set_quota(shares(0.5));
  ASSERT_EQ(c.arena_bytes(), kMiB);
  ASSERT_EQ(c.arena_base(), 31 * kMiB);
  std::vector<std::uint64_t> handles;
  for (std::uint32_t i = 0; i < 8192; ++i) {
    auto s = fill(c, i, 256, 1, kAlice);
    ASSERT_TRUE(s) << i << ": " << s.error().to_string();
    if (i % 128 != 0) ASSERT_TRUE(c.release((*s)->id, 1, nullptr));
  }
  EXPECT_TRUE(c.verify()) << c.verify().error().to_string();
  for (const auto& pins : c.pin_holders()) EXPECT_EQ(pins.uid, kAlice);
  // Root (uncapped) takes 30 of the main region's 31 MiB in one range.
  auto big = fill(c, 900000, 30 * kMiB, 2, 0);
  ASSERT_TRUE(big) << big.error().to_string();
  EXPECT_FALSE((*big)->in_arena);
  EXPECT_LT((*big)->offset + (*big)->footprint, c.arena_base() + 1);
  EXPECT_TRUE(c.verify()) << c.verify().error().to_string();
}

// Arena slots take power-of-two ranges aligned to their size; a slot over kSmallSlotMax goes to the main region, and a
// small one goes there too when every arena slot is pinned.
TEST(CacheShares, ArenaPlacement) {
  Cache c(32 * kMiB);
  std::set<std::uint64_t> offsets;
  const std::vector<std::uint64_t> sizes = {1, 255, 256, 257, 1000, 4096, 4097, 65535, 65536};
  std::uint32_t t = 0;
  for (std::uint64_t b : sizes) {
    auto s = fill(c, t++, b, 1, kAlice);
    ASSERT_TRUE(s);
    EXPECT_TRUE((*s)->in_arena) << b;
    EXPECT_GE((*s)->footprint, b);
    EXPECT_EQ((*s)->footprint & ((*s)->footprint - 1), 0u) << b;
    EXPECT_EQ((*s)->offset % (*s)->footprint, 0u) << b;
    EXPECT_GE((*s)->offset, c.arena_base());
  }
  auto large = fill(c, t++, 65537, 1, kAlice);
  ASSERT_TRUE(large);
  EXPECT_FALSE((*large)->in_arena);
  EXPECT_TRUE(c.verify()) << c.verify().error().to_string();
  // An arena full of pinned slots: the next small one spills to the main region.
  Cache full(32 * kMiB);
  for (std::uint64_t i = 0; i < full.arena_bytes() / 256; ++i) {
    auto a = fill(full, std::uint32_t(i), 256, 1, kAlice);
    ASSERT_TRUE(a);
    ASSERT_TRUE((*a)->in_arena);
  }
  auto spilled = fill(full, 1u << 30, 300, 1, kAlice);
  ASSERT_TRUE(spilled) << spilled.error().to_string();
  EXPECT_FALSE((*spilled)->in_arena);
  EXPECT_LT((*spilled)->offset, full.arena_base());
  EXPECT_TRUE(full.verify()) << full.verify().error().to_string();
  // A budget too small for an arena keeps one region.
  Cache tiny(4 * kMiB);
  EXPECT_EQ(tiny.arena_bytes(), 0u);
  auto s = fill(tiny, 1, 100, 1, kAlice);
  ASSERT_TRUE(s);
  EXPECT_FALSE((*s)->in_arena);
  EXPECT_EQ((*s)->footprint, 256u);
}

// At max_slots a new slot evicts the least recently used one; when none can be evicted the refusal names the limit.
TEST(CacheShares, TheSlotCountIsBounded) {
  Cache c(32 * kMiB);
  c.set_quota(shares(1.0, 100));
  for (std::uint32_t i = 0; i < 1000; ++i) {
    auto s = fill(c, i, 256, 1, kAlice);
    ASSERT_TRUE(s);
    ASSERT_TRUE(c.release((*s)->id, 1, nullptr));
  }
  EXPECT_EQ(c.stats().slots, 100u);
  EXPECT_EQ(c.stats().evictions, 900u);
  for (std::uint32_t i = 1000; i < 1100; ++i) ASSERT_TRUE(fill(c, i, 256, 1, kAlice));
  auto refused = fill(c, 5000, 256, 1, kAlice);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(refused.error().message.find("max_slots_per_pool = 100"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(c.verify());
}

// The shared-lock hit (pin_shared) of a released slot counts against the share as acquire does, and is refused past
// it; unpin_shared gives the charge back.
TEST(CacheShares, TheSharedHitPathKeepsTheShare) {
  Cache c(32 * kMiB);
  c.set_quota(shares(0.5));
  // epkd's own uid holds a pin on each slot so that the totals stay above zero (the shared paths' precondition).
  std::vector<std::uint64_t> ids;
  for (std::uint32_t i = 0; i < 17; ++i) {
    auto s = fill(c, i, kMiB, 9, kOwner);
    ASSERT_TRUE(s);
    ids.push_back((*s)->id);
  }
  // Alice pins and releases all 17 once (her entries then exist at 0), 16 within her share.
  for (std::uint32_t i = 0; i < 16; ++i) {
    auto s = fill(c, i, kMiB, 1, kAlice);
    ASSERT_TRUE(s);
    ASSERT_TRUE(c.release((*s)->id, 1, nullptr));
  }
  auto s16 = fill(c, 16, kMiB, 2, kAlice);  // another session of hers
  ASSERT_TRUE(s16);
  ASSERT_TRUE(c.release((*s16)->id, 2, nullptr));
  for (std::uint32_t i = 0; i < 15; ++i) ASSERT_NE(c.pin_shared(key(i), 1), nullptr) << i;
  EXPECT_EQ(c.pinned_bytes_of_uid(kAlice), 15 * kMiB);
  ASSERT_NE(c.pin_shared(key(16), 2), nullptr);
  EXPECT_EQ(c.pin_shared(key(15), 1), nullptr);  // past her share: acquire() answers the refusal
  auto refused = c.acquire(key(15), kMiB, 1, kAlice);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kQuota);
  EXPECT_TRUE(c.unpin_shared(ids[16], 2));
  EXPECT_EQ(c.pinned_bytes_of_uid(kAlice), 15 * kMiB);
  EXPECT_NE(c.pin_shared(key(15), 1), nullptr);
  EXPECT_EQ(c.pinned_bytes_of_uid(kAlice), 16 * kMiB);
  EXPECT_TRUE(c.verify()) << c.verify().error().to_string();
}

}  // namespace
}  // namespace epk::daemon
