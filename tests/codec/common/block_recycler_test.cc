// BlockRecycler: a block given back is handed out again for a request of its size class or of up to kBiggerClasses
// smaller ones, never to two holders at once (threads fill and check their blocks), the caps on kept blocks and
// bytes hold, and RecyclingAllocator sends large vectors through the process's recycler and small ones past it.
#include "codec/common/block_recycler.h"

#include <gtest/gtest.h>

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
