#include "daemon/cache/slot_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace epk::daemon {
namespace {

TEST(SlotAllocator, FirstFitAlignedAndMergedOnFree) {
  SlotAllocator a(10 * kSlotAlignment + 7);  // the odd tail is unusable
  EXPECT_EQ(a.capacity(), 10 * kSlotAlignment);
  auto x = a.allocate(1);
  auto y = a.allocate(kSlotAlignment + 1);
  auto z = a.allocate(kSlotAlignment);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, kSlotAlignment);
  EXPECT_EQ(*z, 3 * kSlotAlignment);
  a.free(*y, kSlotAlignment + 1);
  a.free(*x, 1);
  auto big = a.allocate(3 * kSlotAlignment);  // only fits if x and y merged
  ASSERT_TRUE(big);
  EXPECT_EQ(*big, 0u);
  EXPECT_TRUE(a.verify());
}

TEST(SlotAllocator, RefusesWhatDoesNotFit) {
  SlotAllocator a(4 * kSlotAlignment);
  EXPECT_FALSE(a.allocate(4 * kSlotAlignment + 1));
  auto p = a.allocate(2 * kSlotAlignment);
  auto q = a.allocate(kSlotAlignment);
  ASSERT_TRUE(p && q);
  a.free(*p, 2 * kSlotAlignment);
  EXPECT_FALSE(a.allocate(3 * kSlotAlignment));  // 3 free, but not in one piece
  EXPECT_TRUE(a.allocate(2 * kSlotAlignment));
  EXPECT_TRUE(a.verify());
}

TEST(SlotAllocator, RandomAllocFreeKeepsTheBooksBalanced) {
  std::mt19937_64 rng(7);
  SlotAllocator a(1000 * kSlotAlignment);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  for (int i = 0; i < 5000; ++i) {
    if (live.empty() || rng() % 2 == 0) {
      std::uint64_t n = 1 + rng() % (20 * kSlotAlignment);
      if (auto off = a.allocate(n)) live.emplace_back(*off, n);
    } else {
      std::size_t k = rng() % live.size();
      a.free(live[k].first, live[k].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_TRUE(a.verify()) << "step " << i;
  }
  for (auto [off, n] : live) a.free(off, n);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_TRUE(a.allocate(1000 * kSlotAlignment));
}

}  // namespace
}  // namespace epk::daemon
