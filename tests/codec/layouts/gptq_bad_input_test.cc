#include <gtest/gtest.h>

#include "codec/layouts/gptq.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

using namespace testing;

GptqViews views(const std::vector<Tensor>& ts) {
  return GptqViews{view_of(ts, "qweight"), view_of(ts, "qzeros"), view_of(ts, "scales"), view_of(ts, "g_idx")};
}

TEST(GptqBadInput, ShapesDtypesAndGidxAreChecked) {
  auto t = random_quant_tensor(4, 64, 16, 32, 1, true);
  auto ts = write_gptq(t, GptqZeros::kV2);
  ASSERT_TRUE(ts);
  auto v = views(*ts);
  auto r = read_gptq(v, 4, 16, GptqZeros::kV2);  // wrong group size: scales have 2 groups, 16 needs 4
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput);
  EXPECT_NE(r.error().message.find("scales"), std::string::npos);

  auto short_bytes = v;
  short_bytes.qweight.bytes = short_bytes.qweight.bytes.first(short_bytes.qweight.bytes.size() - 4);
  EXPECT_FALSE(read_gptq(short_bytes, 4, 32, GptqZeros::kV2));

  auto wrong_dtype = v;
  wrong_dtype.scales.dtype = DType::kI32;
  EXPECT_FALSE(read_gptq(wrong_dtype, 4, 32, GptqZeros::kV2));

  auto wrong_zeros = v;
  wrong_zeros.qzeros.shape = {2, 1};
  EXPECT_FALSE(read_gptq(wrong_zeros, 4, 32, GptqZeros::kV2));

  Tensor g = *find_tensor(*ts, "g_idx");
  store_le<std::int32_t>(g.bytes.data() + 4 * 10, 2);  // only groups 0 and 1 exist
  auto bad_g = v;
  bad_g.g_idx = g.view();
  auto rg = read_gptq(bad_g, 4, 32, GptqZeros::kV2);
  ASSERT_FALSE(rg);
  EXPECT_NE(rg.error().message.find("g_idx[10]"), std::string::npos) << rg.error().message;

  EXPECT_FALSE(read_gptq(v, 5, 32, GptqZeros::kV2));
  auto three = v;
  three.qweight.shape = {1, 16};  // 1 word row of 3-bit is 10.67 rows
  three.qweight.bytes = three.qweight.bytes.first(64);
  EXPECT_FALSE(read_gptq(three, 3, 32, GptqZeros::kV2));
}

}  // namespace
}  // namespace epk::layouts

namespace epk::layouts {
namespace {

TEST(GptqBadInput, EmptyTensorsAreRefusedNotDividedBy) {
  const std::vector<std::uint8_t> none;
  TensorView qweight{"qweight", DType::kI32, {0, 0}, none};
  TensorView qzeros{"qzeros", DType::kI32, {0, 0}, none};
  TensorView scales{"scales", DType::kF16, {0, 0}, none};
  EXPECT_FALSE(read_gptq(GptqViews{qweight, qzeros, scales, std::nullopt}, 4, -1, GptqZeros::kV1));
}

}  // namespace
}  // namespace epk::layouts
