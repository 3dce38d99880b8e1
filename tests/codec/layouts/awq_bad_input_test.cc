#include <gtest/gtest.h>

#include "codec/layouts/awq.h"

namespace epk::layouts {
namespace {

TEST(AwqBadInput, EmptyAndMisshapenTensors) {
  const std::vector<std::uint8_t> none;
  TensorView empty{"qweight", DType::kI32, {0, 4}, none};
  TensorView qz{"qzeros", DType::kI32, {0, 4}, none};
  TensorView sc{"scales", DType::kF16, {0, 32}, none};
  EXPECT_FALSE(read_awq(AwqViews{empty, qz, sc}, -1));
  std::vector<std::uint8_t> words(4 * 4 * 4, 0);
  TensorView qweight{"qweight", DType::kI32, {4, 4}, words};
  auto r = read_awq(AwqViews{qweight, qz, sc}, 3);  // K = 4 is not a multiple of 3
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("qweight"), std::string::npos);
}

}  // namespace
}  // namespace epk::layouts
