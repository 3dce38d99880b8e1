// DefaultInitAllocator: resize() of trivially constructible elements writes nothing into the new storage (checked
// through a base allocator that fills what it hands out with a pattern, which std::allocator-like value
// initialisation would overwrite with zeros), resize with a value and construction from values still write them,
// and the vector behaves as a vector otherwise (growth keeps the elements, copies compare equal).
#include "codec/common/default_init_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace epk {
namespace {

constexpr unsigned char kPattern = 0xA7;

// std::allocator whose storage arrives filled with kPattern.
template <class T>
struct PatternAllocator : std::allocator<T> {
  using value_type = T;
  PatternAllocator() = default;
  template <class U>
  PatternAllocator(const PatternAllocator<U>&) noexcept {}
  template <class U>
  struct rebind {
    using other = PatternAllocator<U>;
  };
  T* allocate(std::size_t n) {
    T* p = std::allocator<T>::allocate(n);
    std::memset(static_cast<void*>(p), kPattern, n * sizeof(T));
    return p;
  }
};

using Words = std::vector<std::uint16_t, DefaultInitAllocator<std::uint16_t, PatternAllocator<std::uint16_t>>>;
using ZeroingWords = std::vector<std::uint16_t, PatternAllocator<std::uint16_t>>;

bool all_pattern(const std::uint16_t* p, std::size_t n) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n * 2; ++i)
    if (b[i] != kPattern) return false;
  return true;
}

TEST(DefaultInitAllocator, ResizeWritesNothingIntoNewStorage) {
  Words w;
  w.reserve(1000);
  w.resize(1000);
  EXPECT_TRUE(all_pattern(w.data(), w.size()));
  // The same base allocator without it zero-fills: the check above can tell the two apart.
  ZeroingWords z;
  z.reserve(1000);
  z.resize(1000);
  EXPECT_FALSE(all_pattern(z.data(), z.size()));
  EXPECT_EQ(z[0], 0);
}

TEST(DefaultInitAllocator, ValuesAreStillWrittenWhereGiven) {
  Words w(5, std::uint16_t{7});
  EXPECT_EQ(w, Words({7, 7, 7, 7, 7}));
  w.resize(8, 9);
  EXPECT_EQ(w, Words({7, 7, 7, 7, 7, 9, 9, 9}));
  w.push_back(3);
  w.insert(w.begin(), std::uint16_t{1});
  EXPECT_EQ(w.front(), 1);
  EXPECT_EQ(w.back(), 3);
  EXPECT_EQ(w.size(), 10u);
}

TEST(DefaultInitAllocator, GrowthKeepsElementsAndCopiesCompareEqual) {
  std::vector<std::uint16_t, DefaultInitAllocator<std::uint16_t>> w;
  for (std::uint16_t i = 0; i < 5000; ++i) w.push_back(i);
  const auto copy = w;
  EXPECT_EQ(copy, w);
  auto moved = std::move(w);
  EXPECT_EQ(moved, copy);
  for (std::uint16_t i = 0; i < 5000; ++i) ASSERT_EQ(moved[i], i);
}

}  // namespace
}  // namespace epk
