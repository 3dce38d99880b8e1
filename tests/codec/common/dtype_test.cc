#include "codec/common/dtype.h"

#include <gtest/gtest.h>

namespace epk {
namespace {

TEST(DType, NamesRoundTripAndWidthsMatchSafetensors) {
  for (int i = 0; i < kDTypeCount; ++i) {
    auto t = dtype_from_code(static_cast<std::uint32_t>(i));
    ASSERT_TRUE(t.has_value());
    auto back = dtype_from_name(dtype_name(*t));
    ASSERT_TRUE(back.has_value()) << dtype_name(*t);
    EXPECT_EQ(*back, *t);
  }
  EXPECT_EQ(dtype_bits(DType::kBF16), 16);
  EXPECT_EQ(dtype_bits(DType::kF8E4M3), 8);
  EXPECT_EQ(dtype_bits(DType::kF4), 4);
  EXPECT_EQ(dtype_bits(DType::kF64), 64);
  EXPECT_FALSE(dtype_from_name("F17").has_value());
  EXPECT_FALSE(dtype_from_code(kDTypeCount).has_value());
}

}  // namespace
}  // namespace epk
