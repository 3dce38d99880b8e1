// BlockRecycler: a block given back is handed out again for a request of its size class or of up to kBiggerClasses
// smaller ones, never to two holders at once (threads fill and check their blocks), the caps on kept blocks and
// bytes hold, blocks are pinned and unpinned by an installed pinner, and RecyclingAllocator sends large vectors
// through the process's recycler and small ones past it.
#include "codec/common/block_recycler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace epk {
namespace {

constexpr std::size_t kClass = BlockRecycler::kClassBytes;

TEST(BlockRecycler, AGivenBlockServesItsClassAgain) {
  BlockRecycler r;
  void* a = r.take(5 * kClass - 100);
  std::memset(a, 1, 5 * kClass - 100);
  r.give(a, 5 * kClass - 100);
  EXPECT_EQ(r.kept_blocks(), 1u);
  EXPECT_EQ(r.kept_bytes(), 5 * kClass);
  void* b = r.take(4 * kClass + 1);  // the same class
  EXPECT_EQ(b, a);
  EXPECT_EQ(r.kept_blocks(), 0u);
  std::memset(b, 2, 4 * kClass + 1);  // the whole request is usable
  r.give(b, 4 * kClass + 1);
}

TEST(BlockRecycler, SmallerRequestsTakeBiggerBlocksUpToTheLimit) {
  BlockRecycler r;
  const std::size_t big = (3 + BlockRecycler::kBiggerClasses) * kClass;
  void* a = r.take(big);
  r.give(a, big);
  void* fresh = r.take(2 * kClass);  // kBiggerClasses + 1 classes smaller: not served by `a`
  EXPECT_NE(fresh, a);
  void* b = r.take(3 * kClass);  // kBiggerClasses smaller
  EXPECT_EQ(b, a);
  std::memset(b, 3, 3 * kClass);
  // Given back as what it was taken for: it serves that class again.
  r.give(b, 3 * kClass);
  EXPECT_EQ(r.kept_bytes(), 3 * kClass);
  EXPECT_EQ(r.take(3 * kClass), a);
  r.give(a, 3 * kClass);
  r.give(fresh, 2 * kClass);
}

TEST(BlockRecycler, KeepsNoMoreThanItsCaps) {
  BlockRecycler r;
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < BlockRecycler::kKeptBlocks + 3; ++i) blocks.push_back(r.take(kClass));
  for (void* p : blocks) r.give(p, kClass);
  EXPECT_EQ(r.kept_blocks(), BlockRecycler::kKeptBlocks);
  BlockRecycler s;
  const std::size_t half = BlockRecycler::kKeptBytes / 2 + kClass;  // two do not fit under the byte cap
  void* x = s.take(half);
  void* y = s.take(half);
  s.give(x, half);
  s.give(y, half);
  EXPECT_EQ(s.kept_blocks(), 1u);
  EXPECT_LE(s.kept_bytes(), BlockRecycler::kKeptBytes);
}

// A fake pinner: records what it pinned and unpinned; refuses blocks while `refuse` is set.
struct FakePins {
  static inline std::vector<std::pair<void*, std::size_t>> pinned;
  static inline std::vector<void*> unpinned;
  static inline bool refuse = false;
  static bool pin(void* p, std::size_t bytes) {
    if (refuse) return false;
    pinned.emplace_back(p, bytes);
    return true;
  }
  static void unpin(void* p) { unpinned.push_back(p); }
};

// With a pinner installed, a block is pinned when it is first kept (the class it was given back as, whole), stays
// pinned while recycled, and is unpinned before it is freed (past the caps, or with the recycler); a block freed at
// once, and one the pinner refuses, are never reported pinned.
TEST(BlockRecycler, PinsKeptBlocksOnceAndUnpinsBeforeFreeing) {
  FakePins::pinned.clear();
  FakePins::unpinned.clear();
  FakePins::refuse = false;
  std::size_t unpinned_before_end = 0;
  {
    BlockRecycler r;
    void* a = r.take(3 * kClass - 5);
    r.set_pinner({&FakePins::pin, &FakePins::unpin});
    r.set_pinner({nullptr, nullptr});  // the first pinner stays
    EXPECT_FALSE(r.pinned(a, 1)) << "a block in use is not pinned";
    r.give(a, 3 * kClass - 5);
    ASSERT_EQ(FakePins::pinned.size(), 1u);
    EXPECT_EQ(FakePins::pinned[0].first, a);
    EXPECT_EQ(FakePins::pinned[0].second, 3 * kClass);  // the whole class
    void* again = r.take(3 * kClass);
    ASSERT_EQ(again, a);
    EXPECT_TRUE(r.pinned(again, 3 * kClass));
    EXPECT_TRUE(r.pinned(static_cast<char*>(a) + kClass, 2 * kClass));
    EXPECT_FALSE(r.pinned(static_cast<char*>(a) + kClass, 2 * kClass + 1));  // past its end
    EXPECT_FALSE(r.pinned(static_cast<char*>(a) - 1, 2));
    FakePins::refuse = true;
    void* refused = r.take(kClass);  // fresh: `a` is held
    r.give(refused, kClass);
    EXPECT_EQ(r.take(kClass), refused);
    EXPECT_FALSE(r.pinned(refused, 1));
    FakePins::refuse = false;
    r.give(again, 3 * kClass);
    EXPECT_EQ(FakePins::pinned.size(), 1u) << "a block kept again is not pinned again";
    // Past the block cap: the blocks given back last are freed unpinned; the kept ones are pinned.
    std::vector<void*> many;
    for (std::size_t i = 0; i + 1 < BlockRecycler::kKeptBlocks + 2; ++i) many.push_back(r.take(kClass));
    for (void* p : many) r.give(p, kClass);  // the first is `a` (3 classes serve 1): one past the cap
    EXPECT_EQ(r.kept_blocks(), BlockRecycler::kKeptBlocks);
    EXPECT_EQ(FakePins::pinned.size(), BlockRecycler::kKeptBlocks);
    EXPECT_TRUE(FakePins::unpinned.empty());
    EXPECT_FALSE(r.pinned(many.back(), 1));
    r.give(refused, kClass);  // past the cap: freed, not pinned
    unpinned_before_end = FakePins::unpinned.size();
  }
  EXPECT_EQ(unpinned_before_end, 0u);
  // The recycler's end unpinned every block it pinned, each once.
  std::vector<void*> pins, unpins = FakePins::unpinned;
  for (const auto& [p, n] : FakePins::pinned) pins.push_back(p);
  std::sort(pins.begin(), pins.end());
  std::sort(unpins.begin(), unpins.end());
  EXPECT_EQ(pins, unpins);
}

// A kept block freed past the caps is unpinned first.
TEST(BlockRecycler, UnpinsAKeptBlockItFrees) {
  FakePins::pinned.clear();
  FakePins::unpinned.clear();
  FakePins::refuse = false;
  BlockRecycler r;
  r.set_pinner({&FakePins::pin, &FakePins::unpin});
  const std::size_t half = BlockRecycler::kKeptBytes / 2 + kClass;  // two do not fit under the byte cap
  void* x = r.take(half);
  void* y = r.take(half);
  r.give(x, half);
  EXPECT_TRUE(r.pinned(x, half));
  r.give(y, half);  // past the byte cap: freed at once, never pinned
  EXPECT_EQ(FakePins::pinned.size(), 1u);
  EXPECT_TRUE(FakePins::unpinned.empty());
}

TEST(BlockRecycler, NoBlockHasTwoHoldersAcrossThreads) {
  BlockRecycler r;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t bytes = kClass * std::size_t(1 + t % 3) - std::size_t(t) * 17;
      for (int i = 0; i < 100; ++i) {
        auto* p = static_cast<unsigned char*>(r.take(bytes));
        std::memset(p, t + 1, bytes);
        std::this_thread::yield();
        for (std::size_t k = 0; k < bytes; k += 4093)
          if (p[k] != t + 1) ++bad;
        if (p[bytes - 1] != t + 1) ++bad;
        r.give(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, 0);
  EXPECT_LE(r.kept_blocks(), BlockRecycler::kKeptBlocks);
}

TEST(RecyclingAllocator, LargeVectorsReuseTheProcessBlocksSmallOnesDoNot) {
  using Words = std::vector<std::uint16_t, RecyclingAllocator<std::uint16_t>>;
  const std::uint16_t* first = nullptr;
  {
    Words w(5'000'000, 7);  // 10 MB
    first = w.data();
    EXPECT_EQ(w[4'999'999], 7);
  }
  const std::size_t kept = BlockRecycler::process().kept_blocks();
  EXPECT_GE(kept, 1u);
  {
    Words w(5'000'100, 8);  // the same class
    EXPECT_EQ(w.data(), first);
    EXPECT_EQ(w[5'000'099], 8);
    EXPECT_EQ(BlockRecycler::process().kept_blocks(), kept - 1);
  }
  {
    Words small(1000, 1);
    EXPECT_EQ(BlockRecycler::process().kept_blocks(), kept);
  }
  EXPECT_EQ(BlockRecycler::process().kept_blocks(), kept);
}

}  // namespace
}  // namespace epk
