#include <gtest/gtest.h>

#include <cstring>

#include "codec/layouts/bnb.h"

namespace epk::layouts::bnb {
namespace {

Result<State> parse(const std::string& json, std::size_t weight_bytes, std::size_t blocks) {
  static std::vector<std::uint8_t> weight, absmax, state;
  weight.assign(weight_bytes, 0);
  absmax.assign(blocks * 4, 0);
  state.assign(json.begin(), json.end());
  Views v{TensorView{"m.weight", DType::kU8, {static_cast<std::int64_t>(weight_bytes), 1}, weight},
          TensorView{"m.weight.absmax", DType::kF32, {static_cast<std::int64_t>(blocks)}, absmax},
          std::nullopt, std::nullopt, std::nullopt,
          TensorView{"m.weight.quant_state", DType::kU8, {static_cast<std::int64_t>(state.size())}, state}};
  return read_state(v);
}

TEST(BnbBadInput, QuantStateJsonIsChecked) {
  const char* ok = R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [8, 16]})";
  ASSERT_TRUE(parse(ok, 64, 2));
  EXPECT_FALSE(parse("{not json", 64, 2));
  EXPECT_FALSE(parse("[1, 2]", 64, 2));
  EXPECT_FALSE(parse(R"({"quant_type": "nf3", "blocksize": 64, "dtype": "bfloat16", "shape": [8, 16]})", 64, 2));
  EXPECT_FALSE(parse(R"({"quant_type": "nf4", "blocksize": 0, "dtype": "bfloat16", "shape": [8, 16]})", 64, 2));
  EXPECT_FALSE(parse(R"({"quant_type": "nf4", "blocksize": "64", "dtype": "bfloat16", "shape": [8, 16]})", 64, 2));
  EXPECT_FALSE(parse(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "int8", "shape": [8, 16]})", 64, 2));
  EXPECT_FALSE(parse(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [-8, 16]})", 64, 2));
  EXPECT_FALSE(parse(
      R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [4294967296, 4294967296]})", 64, 2));
}

TEST(BnbBadInput, SizesMustMatchTheShape) {
  const char* ok = R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [8, 16]})";
  auto r = parse(ok, 63, 2);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("m.weight"), std::string::npos) << r.error().message;
  EXPECT_FALSE(parse(ok, 64, 1));
  EXPECT_FALSE(parse(ok, 64, 3));
}

}  // namespace
}  // namespace epk::layouts::bnb
