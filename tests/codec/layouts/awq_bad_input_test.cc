#include <gtest/gtest.h>

#include "codec/layouts/awq.h"
#include "codec/layouts/awq_gemv.h"

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

namespace epk::layouts {
namespace {

// GEMV: every size is checked against the others before a word is read; errors name the tensor.
TEST(AwqGemvBadInput, MisshapenTensorsAreRefusedNamingThem) {
  const std::int64_t n = 16, k = 256, w = awq_gemv_zeros_width(k, 128);  // 2 groups: width 1
  std::vector<std::uint8_t> qw(std::size_t(n * k / 8) * 4), qz(std::size_t(n * w) * 4), sc(std::size_t(n * 8 * w) * 2);
  TensorView qweight{"l.qweight", DType::kI32, {n, k / 8}, qw};
  TensorView qzeros{"l.qzeros", DType::kI32, {n, w}, qz};
  TensorView scales{"l.scales", DType::kF16, {n, 8 * w}, sc};
  ASSERT_TRUE(read_awq_gemv({qweight, qzeros, scales}, 128));
  auto expect_refused = [](const Result<QuantTensor>& r, const char* name) {
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find(name), std::string::npos) << r.error().message;
  };
  TensorView short_zeros{"l.qzeros", DType::kI32, {n, w}, std::span(qz).first(qz.size() - 4)};
  expect_refused(read_awq_gemv({qweight, short_zeros, scales}, 128), "l.qzeros");
  TensorView wide_scales{"l.scales", DType::kF16, {n, 4 * w}, std::span(sc).first(sc.size() / 2)};
  expect_refused(read_awq_gemv({qweight, qzeros, wide_scales}, 128), "l.scales");
  expect_refused(read_awq_gemv({qweight, qzeros, scales}, 48), "l.qweight");  // not a GEMV group size
  expect_refused(read_awq_gemv({qweight, qzeros, scales}, 96), "l.qweight");  // K % G != 0
  TensorView odd_n{"l.qweight", DType::kI32, {n - 1, k / 8}, std::span(qw).first(qw.size() - std::size_t(k / 8) * 4)};
  expect_refused(read_awq_gemv({odd_n, qzeros, scales}, 128), "l.qweight");
  TensorView f64{"l.qweight", DType::kF64, {n, k / 16}, qw};
  expect_refused(read_awq_gemv({f64, qzeros, scales}, 128), "l.qweight");
}

}  // namespace
}  // namespace epk::layouts
