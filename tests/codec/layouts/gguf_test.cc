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
  EXPECT_FALSE(dequantize(99, block, 32));
  // Known sizes, no dequantizer: unsupported (not bad input), and dequantize_supported says so first.
  for (GgmlType t : {GgmlType::kQ8_K, GgmlType::kQ8_1, GgmlType::kIQ2_XXS, GgmlType::kTQ1_0, GgmlType::kMXFP4}) {
    const auto traits = type_traits(static_cast<std::uint32_t>(t));
    ASSERT_TRUE(traits);
    EXPECT_FALSE(dequantize_supported(static_cast<std::uint32_t>(t))) << traits->name;
    auto y = dequantize(static_cast<std::uint32_t>(t), std::vector<std::uint8_t>(traits->type_size),
                        traits->block_size);
    ASSERT_FALSE(y) << traits->name;
    EXPECT_EQ(y.error().code, ErrorCode::kUnsupported) << traits->name;
  }
}

TEST(GgufDequant, Q3_KHighBitClearSubtractsFourAndScalesAreSigned) {
  std::vector<std::uint8_t> block(110);
  // Element 130 = 128 * 1 + 32 * 0 + 2: low bits 0..1 of qs[32 + 2]; high bit 130 / 32 = 4 of hmask[2].
  block[32 + 32 + 2] = 0x3;      // low = 3
  block[2] = 1u << 4;            // high bit set: no -4
  // Element 131: low = 1, high bit clear -> 1 - 4 = -3.
  block[32 + 32 + 3] = 0x1;
  // Sub-block 8 (elements 128..143): low nibble from the high half of scales[0], bits 4..5 from bits 4..5 of
  // scales[8] (i / 4 = 2). 0x3 | (0x2 << 4) = 35 -> 35 - 32 = 3.
  block[96 + 0] = 0x30;
  block[96 + 8] = 0x2 << 4;
  store_le<std::uint16_t>(block.data() + 108, f32_to_f16(0.5f));
  auto y = dequantize(static_cast<std::uint32_t>(GgmlType::kQ3_K), block, 256);
  ASSERT_TRUE(y) << y.error().to_string();
  EXPECT_EQ((*y)[130], 0.5f * 3.0f * 3.0f);
  EXPECT_EQ((*y)[131], 0.5f * 3.0f * -3.0f);
  EXPECT_EQ((*y)[0], 0.5f * -32.0f * -4.0f);  // scale 0 - 32, every high bit clear
}

TEST(GgufDequant, Iq4NlLooksUpTheNonUniformTable) {
  std::vector<std::uint8_t> block(18);
  store_le<std::uint16_t>(block.data(), f32_to_f16(0.25f));
  block[2 + 5] = 0xF0;  // element 5 -> index 0 (-127); element 21 -> index 15 (113)
  auto y = dequantize(static_cast<std::uint32_t>(GgmlType::kIQ4_NL), block, 32);
  ASSERT_TRUE(y);
  EXPECT_EQ((*y)[5], 0.25f * -127.0f);
  EXPECT_EQ((*y)[21], 0.25f * 113.0f);
}

TEST(GgufBlockScales, NamesTheBlockAndFieldOfANonFiniteScale) {
  std::vector<std::uint8_t> q8(3 * 34);
  for (int b = 0; b < 3; ++b) store_le<std::uint16_t>(q8.data() + 34 * b, f32_to_f16(0.125f));
  EXPECT_TRUE(check_block_scales(static_cast<std::uint32_t>(GgmlType::kQ8_0), q8, 96, "t"));
  store_le<std::uint16_t>(q8.data() + 34 * 2, 0x7E00);  // NaN in block 2
  auto st = check_block_scales(static_cast<std::uint32_t>(GgmlType::kQ8_0), q8, 96, "gguf tensor 'w'");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::kBadInput);
  EXPECT_NE(st.error().message.find("gguf tensor 'w'"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("block 2 (elements 64..95)"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("field d is NaN"), std::string::npos) << st.error().message;

  // Q2_K keeps d and dmin at the end of its block; an infinite dmin is named as such.
  std::vector<std::uint8_t> q2(84);
  store_le<std::uint16_t>(q2.data() + 82, 0xFC00);  // -inf
  st = check_block_scales(static_cast<std::uint32_t>(GgmlType::kQ2_K), q2, 256, "x");
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("block 0 (elements 0..255): field dmin is infinite"), std::string::npos)
      << st.error().message;
  // The largest finite f16 is fine.
  store_le<std::uint16_t>(q2.data() + 82, 0x7BFF);
  EXPECT_TRUE(check_block_scales(static_cast<std::uint32_t>(GgmlType::kQ2_K), q2, 256, "x"));
}

}  // namespace
}  // namespace epk::layouts::gguf
