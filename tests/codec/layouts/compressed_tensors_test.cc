#include "codec/layouts/compressed_tensors.h"

#include <gtest/gtest.h>

#include "codec/layouts/gptq.h"
#include "tests/codec/layouts/quant_fixtures.h"

namespace epk::layouts {
namespace {

using namespace testing;

CtViews views(const std::vector<Tensor>& ts) {
  CtViews v{view_of(ts, "weight_packed"), view_of(ts, "weight_shape"), view_of(ts, "weight_scale"), std::nullopt,
            std::nullopt};
  if (find_tensor(ts, "weight_zero_point")) v.weight_zero_point = view_of(ts, "weight_zero_point");
  if (find_tensor(ts, "weight_g_idx")) v.weight_g_idx = view_of(ts, "weight_g_idx");
  return v;
}

TEST(CompressedTensors, RoundTripsWidthsPackingsProbesAndOddK) {
  for (int bits = 2; bits <= 8; ++bits) {
    for (auto packing : {CtPacking::kDense, CtPacking::kPerWord}) {
      for (auto probe : kAllProbes) {
        for (bool symmetric : {false, true}) {
          // K = 100: not a multiple of any pack factor or of the group; N = 37 odd.
          auto t = random_quant_tensor(bits, 100, 37, 25, 4, /*act_order=*/!symmetric, symmetric, probe);
          auto ts = write_compressed_tensors(t, packing);
          ASSERT_TRUE(ts) << ts.error().to_string();
          EXPECT_EQ(find_tensor(*ts, "weight_zero_point") == nullptr, symmetric);
          auto back = read_compressed_tensors(views(*ts), bits, 25, packing);
          ASSERT_TRUE(back) << back.error().to_string();
          expect_same_logical(*back, t);
        }
      }
    }
  }
}

TEST(CompressedTensors, ThreeBitPackingsDifferOnlyInStraddling) {
  auto t = make_quant_tensor(3, 11, 1, 11);
  for (int k = 0; k < 11; ++k) t.codes[k] = 7;
  t.zeros.assign(1, 4);
  auto dense = write_compressed_tensors(t, CtPacking::kDense);
  auto per_word = write_compressed_tensors(t, CtPacking::kPerWord);
  ASSERT_TRUE(dense && per_word);
  // dense: 33 bits over 2 words, value 10 straddles; per-word: 10 values (30 bits) then 1 in word 1.
  EXPECT_EQ(words_of_tensor(*find_tensor(*dense, "weight_packed")), (std::vector<std::uint32_t>{0xFFFFFFFFu, 0x1u}));
  EXPECT_EQ(words_of_tensor(*find_tensor(*per_word, "weight_packed")),
            (std::vector<std::uint32_t>{0x3FFFFFFFu, 0x7u}));
}

TEST(CompressedTensors, SymmetricFourBitPackedTransposeIsGptqQweight) {
  auto t = random_quant_tensor(4, 128, 48, 32, 8, false, /*symmetric=*/true);
  auto ct = write_compressed_tensors(t, CtPacking::kDense);
  auto gptq = write_gptq(t, GptqZeros::kV1);
  ASSERT_TRUE(ct && gptq);
  auto packed = words_of_tensor(*find_tensor(*ct, "weight_packed"));   // [48, 16]
  auto qweight = words_of_tensor(*find_tensor(*gptq, "qweight"));      // [16, 48]
  for (int n = 0; n < 48; ++n) {
    for (int w = 0; w < 16; ++w) ASSERT_EQ(packed[n * 16 + w], qweight[w * 48 + n]);
  }
}

TEST(CompressedTensors, StoredValueIsSignedPlusOffset) {
  // A signed value -8 (4-bit) is stored 0 and means logical code 0 with symmetric zero 8: w = -8 * s.
  auto t = make_quant_tensor(4, 8, 1, 8);
  t.codes = {0, 1, 7, 8, 9, 14, 15, 8};
  t.zeros = {8};
  t.scales = {0.5f};
  auto ts = write_compressed_tensors(t, CtPacking::kDense);
  ASSERT_TRUE(ts);
  EXPECT_EQ(words_of_tensor(*find_tensor(*ts, "weight_packed"))[0], 0x8FE98710u);
  EXPECT_EQ(dequantize_f32(t)[0], -4.0f);
}

}  // namespace
}  // namespace epk::layouts
