#include "codec/layouts/gguf.h"

#include <gtest/gtest.h>

#include "codec/common/half.h"
#include "tests/codec/layouts/gguf_builder.h"

namespace epk::layouts::gguf {
namespace {

using testing::GgufBuilder;

TEST(GgufFile, ParsesHeaderKeyValuesTensorsAndAlignment) {
  GgufBuilder b;
  b.alignment = 64;
  b.kv_u32("general.alignment", 64);
  b.kv_string("general.name", "tiny");
  b.kv_f32_array("some.floats", {1.5f, -2.0f});
  std::string f32(4 * 6, '\0');
  for (int i = 0; i < 6; ++i) store_le<float>(f32.data() + 4 * i, static_cast<float>(i));
  b.tensor("a", {3, 2}, 0, f32);
  b.tensor("b", {32}, 8, std::string(34, '\x01'));
  auto bytes = b.build();
  auto f = File::parse(bytes, "tiny.gguf");
  ASSERT_TRUE(f) << f.error().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  ASSERT_NE(f->find("general.name"), nullptr);
  EXPECT_EQ(f->find("general.name")->str, "tiny");
  ASSERT_EQ(f->find("some.floats")->count, 2u);
  EXPECT_EQ(f->find("some.floats")->at(1).f, -2.0);
  const TensorInfo* a = f->find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->torch_shape(), (std::vector<std::int64_t>{2, 3}));
  auto deq = dequantize(a->type, f->tensor_bytes(*a), a->n_elements);
  ASSERT_TRUE(deq);
  EXPECT_EQ(*deq, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  const TensorInfo* t = f->find_tensor("b");
  EXPECT_EQ(t->offset, 64u);
  EXPECT_EQ(t->n_bytes, 34u);
}

TEST(GgufDequant, Q4_0SplitsLowAndHighHalvesOfEachByte) {
  std::vector<std::uint8_t> block(18);
  store_le<std::uint16_t>(block.data(), f32_to_f16(0.5f));
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  auto y = dequantize(2, block, 32);
  ASSERT_TRUE(y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ((*y)[j], 0.5f * static_cast<float>(j - 8));             // element j: low nibble of byte j
    EXPECT_EQ((*y)[j + 16], 0.5f * static_cast<float>(15 - j - 8));    // element j+16: high nibble of byte j
  }
}

TEST(GgufDequant, Q6_KUsesBitPlanesAndSignedScales) {
  std::vector<std::uint8_t> block(210, 0);
  // element 200 = 128*1 + 32*2 + 8: low4 from ql[64 + 0 + 8] high nibble, hi2 from qh[32 + 8] bits 4-5
  block[64 + 8] = 0xA0;            // low4 = 10
  block[128 + 32 + 8] = 0x3 << 4;  // hi2 = 3  -> q = 10 | 48 = 58, minus 32 = 26
  block[192 + 200 / 16] = static_cast<std::uint8_t>(-3);
  store_le<std::uint16_t>(block.data() + 208, f32_to_f16(0.25f));
  auto y = dequantize(14, block, 256);
  ASSERT_TRUE(y);
  EXPECT_EQ((*y)[200], 0.25f * -3.0f * 26.0f);
  EXPECT_EQ((*y)[0], 0.25f * 0.0f * -32.0f);
}

TEST(GgufDequant, RejectsWrongSizesAndTypes) {
  std::vector<std::uint8_t> block(18);
  EXPECT_FALSE(dequantize(2, block, 31));
  EXPECT_FALSE(dequantize(2, block, 64));
  EXPECT_FALSE(dequantize(11, std::vector<std::uint8_t>(110), 256));  // Q3_K: known, not implemented
  EXPECT_FALSE(dequantize(99, block, 32));
}

}  // namespace
}  // namespace epk::layouts::gguf
