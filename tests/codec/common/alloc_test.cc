// resize_for_tensor: an allocation no machine can make, or this one cannot, is an error naming what it was for.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "codec/common/alloc.h"

namespace epk {
namespace {

TEST(ResizeForTensor, FitsAndResizes) {
  std::vector<float> v;
  ASSERT_TRUE(resize_for_tensor(v, 1000, "m.epk: tensor 'w'"));
  EXPECT_EQ(v.size(), 1000u);
}

TEST(ResizeForTensor, MoreThanAnyVectorHoldsIsAnErrorNamingTheTensorAndSize) {
  std::vector<float> v(3);
  auto st = resize_for_tensor(v, std::uint64_t(1) << 62, "m.epk: tensor 'w': float32 weights");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kNoSpace);
  EXPECT_EQ(st.error().message,
            "m.epk: tensor 'w': float32 weights: cannot allocate more than 2^64 bytes (4611686018427387904 elements of "
            "4 bytes)");
  EXPECT_EQ(v.size(), 3u);
}

// 2^48 bytes (256 TiB, more than the 47-bit user address space): within max_size, so the allocator itself refuses (std::bad_alloc, caught). Sanitizer
// allocators abort on such a request instead of throwing, so this runs in plain builds only.
TEST(ResizeForTensor, AllocationFailureIsAnErrorNotAnException) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer allocators do not throw std::bad_alloc";
#else
  std::vector<std::uint8_t> v;
  auto st = resize_for_tensor(v, std::uint64_t(1) << 48, "m.epk: tensor 'big'");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "m.epk: tensor 'big': cannot allocate 281474976710656 bytes (281474976710656 elements of "
                                "1 bytes)");
#endif
}

}  // namespace
}  // namespace epk
