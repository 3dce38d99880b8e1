#include "codec/layouts/footprint.h"

#include <gtest/gtest.h>

#include "codec/layouts/convert.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

// A worked example: 4096 x 4096, 4-bit, group 128, fp16 scales (the sizes computed by hand below).
TEST(Footprint, GptqFourBitGroup128) {
  auto t = make_quant_tensor(4, 4096, 4096, 128);
  t.zeros.assign(t.zeros.size(), 8);
  auto c = write_layout(t, Layout::kGptqV2);
  ASSERT_TRUE(c);
  const Footprint f = footprint_of(c->tensors, 4096ull * 4096);
  EXPECT_EQ(f.code_bytes, 4096ull * 4096 / 2);
  EXPECT_EQ(f.scale_bytes, 32ull * 4096 * 2);
  EXPECT_EQ(f.zero_bytes, 32ull * 4096 / 2);
  EXPECT_EQ(f.index_bytes, 4096ull * 4);  // g_idx
  // 4 + 16/128 + 4/128 + 32/4096 bits
  EXPECT_DOUBLE_EQ(f.bits_per_weight(), 4.0 + 0.125 + 0.03125 + 0.0078125);
}

TEST(Footprint, GgufBlocks) {
  EXPECT_DOUBLE_EQ(gguf_footprint(2, 4096).bits_per_weight(), 4.5);     // Q4_0: 18 bytes / 32
  EXPECT_DOUBLE_EQ(gguf_footprint(8, 4096).bits_per_weight(), 8.5);     // Q8_0
  EXPECT_DOUBLE_EQ(gguf_footprint(12, 4096).bits_per_weight(), 4.5);    // Q4_K: 144 / 256
  EXPECT_DOUBLE_EQ(gguf_footprint(14, 4096).bits_per_weight(), 6.5625); // Q6_K: 210 / 256
  EXPECT_EQ(gguf_footprint(14, 256).code_bytes, 192u);
  EXPECT_EQ(gguf_footprint(999, 256).weights, 0u);
}

}  // namespace
}  // namespace epk::layouts
