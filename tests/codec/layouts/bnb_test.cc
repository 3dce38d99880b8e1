#include "codec/layouts/bnb.h"

#include <gtest/gtest.h>

#include <cstring>

#include "codec/layouts/gguf.h"
#include "codec/common/half.h"
#include "codec/layouts/tensor.h"

namespace epk::layouts::bnb {
namespace {

std::vector<std::uint8_t> json_bytes(const std::string& s) { return {s.begin(), s.end()}; }

struct Fixture {
  std::vector<std::uint8_t> weight, absmax, state;
  Views views() const {
    return Views{TensorView{"w.weight", DType::kU8, {static_cast<std::int64_t>(weight.size()), 1}, weight},
                 TensorView{"w.absmax", DType::kF32, {static_cast<std::int64_t>(absmax.size() / 4)}, absmax},
                 std::nullopt,
                 std::nullopt,
                 std::nullopt,
                 TensorView{"w.quant_state", DType::kU8, {static_cast<std::int64_t>(state.size())}, state}};
  }
};

Fixture make(const std::string& json, std::size_t n_weight_bytes, std::vector<float> absmax) {
  Fixture f;
  f.weight.assign(n_weight_bytes, 0);
  f.absmax.resize(absmax.size() * 4);
  if (!absmax.empty()) std::memcpy(f.absmax.data(), absmax.data(), f.absmax.size());
  f.state = json_bytes(json);
  return f;
}

TEST(Bnb, ElementPairsAreHighNibbleFirstAndBlocksCrossRows) {
  // shape [3, 3]: 9 elements, 5 bytes, blocksize 4 -> 3 blocks over the flat index (rows do not restart blocks).
  auto f = make(R"({"quant_type": "nf4", "blocksize": 4, "dtype": "float32", "shape": [3, 3]})", 5, {1.0f, 2.0f, 4.0f});
  f.weight = {0xF0, 0x7F, 0x00, 0x0F, 0xF0};
  auto s = read_state(f.views());
  ASSERT_TRUE(s) << s.error().to_string();
  auto y = dequantize_f32(f.views().weight, *s);
  ASSERT_TRUE(y);
  const std::vector<float> want = {1.0f, -1.0f, 0.0f, 1.0f,         // block 0 (absmax 1): F,0,7,F
                                   -2.0f, -2.0f, -2.0f, 2.0f,        // block 1 (absmax 2): 0,0,0,F
                                   4.0f};                            // block 2 (absmax 4): F (the pad nibble unused)
  EXPECT_EQ(*y, want);
}

// docs/LAYOUTS.md 6.5: GGUF puts element j in the low nibble and j+16 in the high nibble of byte j; bitsandbytes puts
// element 2i in the high nibble and 2i+1 in the low nibble of byte i. The same byte means different elements.
TEST(BnbKnownBugs, NibbleOrderDiffersFromGguf) {
  std::vector<std::uint8_t> q4_0(18, 0x88);  // every code 8 -> 0
  store_le<std::uint16_t>(q4_0.data(), f32_to_f16(1.0f));
  q4_0[2] = 0x9A;  // byte 0: low nibble A (element 0), high nibble 9 (element 16)
  auto g = gguf::dequantize(2, q4_0, 32);
  ASSERT_TRUE(g);
  EXPECT_EQ((*g)[0], 2.0f);   // 0xA - 8
  EXPECT_EQ((*g)[16], 1.0f);  // 0x9 - 8
  EXPECT_EQ((*g)[1], 0.0f);

  auto f = make(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [2]})", 1, {1.0f});
  f.weight = {0x9A};
  auto s = read_state(f.views());
  ASSERT_TRUE(s);
  auto b = dequantize_f32(f.views().weight, *s);
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0], kNf4Levels[9]);   // high nibble first
  EXPECT_EQ((*b)[1], kNf4Levels[10]);  // then the low nibble
}

TEST(Bnb, DoubleQuantResolvesAbsmaxInFloat32Order) {
  Fixture f = make(R"({"quant_type": "fp4", "blocksize": 2, "dtype": "bfloat16", "shape": [4],
                       "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.5})",
                   2, {});
  f.absmax = {3, 200};  // U8 indices into nested_quant_map
  std::vector<std::uint8_t> nested_absmax(4), nested_map(256 * 4);
  store_le<float>(nested_absmax.data(), 0.1f);
  for (int i = 0; i < 256; ++i) store_le<float>(nested_map.data() + 4 * i, static_cast<float>(i - 128) / 128.0f);
  Views v = f.views();
  v.absmax = TensorView{"w.absmax", DType::kU8, {2}, f.absmax};
  v.nested_absmax = TensorView{"w.nested_absmax", DType::kF32, {1}, nested_absmax};
  v.nested_quant_map = TensorView{"w.nested_quant_map", DType::kF32, {256}, nested_map};
  auto s = read_state(v);
  ASSERT_TRUE(s) << s.error().to_string();
  ASSERT_TRUE(s->double_quant);
  const float p0 = (static_cast<float>(3 - 128) / 128.0f) * 0.1f;
  EXPECT_EQ(s->absmax[0], p0 + 0.5f);
  const float p1 = (static_cast<float>(200 - 128) / 128.0f) * 0.1f;
  EXPECT_EQ(s->absmax[1], p1 + 0.5f);
}

}  // namespace
}  // namespace epk::layouts::bnb
