// Tensors packed the way AutoGPTQ, AutoAWQ, vLLM (Marlin), compressed-tensors, gguf-py and bitsandbytes pack them
// dequantize here bit-identically to the reference library's own dequantization, and our writers reproduce the
// reference packers' bytes. Vectors: scripts/testdata/make_layout_vectors.py.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "codec/layouts/awq.h"
#include "codec/layouts/awq_gemv.h"
#include "codec/layouts/bnb.h"
#include "codec/layouts/compressed_tensors.h"
#include "codec/layouts/gguf.h"
#include "codec/layouts/gptq.h"
#include "codec/layouts/marlin.h"
#include "tests/codec/layouts/quant_fixtures.h"
#include "tests/codec/layouts/vectors.h"

namespace epk::layouts {
namespace {

using testing::find_tensor;
using testing::Vectors;

std::vector<std::uint16_t> u16_of(const TensorView& v) {
  std::vector<std::uint16_t> out(v.bytes.size() / 2);
  std::memcpy(out.data(), v.bytes.data(), v.bytes.size());
  return out;
}

std::vector<std::uint8_t> bytes_of(const TensorView& v) { return {v.bytes.begin(), v.bytes.end()}; }

class GptqVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(GptqVectors, DequantizesLikeAutoGptqAndRepacksItsBytes) {
  Vectors vec(std::string(GetParam()) + ".safetensors");
  ASSERT_TRUE(vec.ok());
  const int bits = vec.params()["bits"];
  const std::int64_t group = vec.params()["group_size"];
  const auto conv = vec.params()["checkpoint_format"] == "gptq" ? GptqZeros::kV1 : GptqZeros::kV2;
  GptqViews v{vec.view("qweight"), vec.view("qzeros"), vec.view("scales"), vec.view("g_idx")};
  auto t = read_gptq(v, bits, group, conv);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->codes, vec.values<std::uint8_t>("logical.codes"));
  EXPECT_EQ(t->zeros, vec.values<std::int32_t>("logical.zeros"));
  EXPECT_EQ(dequantize_f16(*t), u16_of(vec.view("ref.dequant")));
  auto written = write_gptq(*t, conv);
  ASSERT_TRUE(written) << written.error().to_string();
  for (const char* name : {"qweight", "qzeros", "scales", "g_idx"}) {
    EXPECT_EQ(find_tensor(*written, name)->bytes, bytes_of(vec.view(name))) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, GptqVectors,
                         ::testing::Values("gptq_4bit_v1_actorder", "gptq_4bit_v1_asym", "gptq_3bit_v1_asym",
                                           "gptq_2bit_v2_asym", "gptq_8bit_v2_asym", "gptq_8bit_v1_sym"));

TEST(AwqVectors, DequantizesLikeAutoAwqAndRepacksItsBytes) {
  Vectors vec("awq_4bit_g64.safetensors");
  ASSERT_TRUE(vec.ok());
  auto t = read_awq(AwqViews{vec.view("qweight"), vec.view("qzeros"), vec.view("scales")}, 64);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->codes, vec.values<std::uint8_t>("logical.codes"));
  EXPECT_EQ(t->zeros, vec.values<std::int32_t>("logical.zeros"));
  EXPECT_EQ(t->zeros[0], 0);  // the case buggy AWQ->GPTQ repacks turn into 15
  EXPECT_EQ(dequantize_f16(*t), u16_of(vec.view("ref.dequant")));
  auto written = write_awq(*t);
  ASSERT_TRUE(written);
  for (const char* name : {"qweight", "qzeros", "scales"}) {
    EXPECT_EQ(find_tensor(*written, name)->bytes, bytes_of(vec.view(name))) << name;
  }
}

class AwqGemvVectors : public ::testing::TestWithParam<const char*> {};

// GEMV packed as AutoAWQ's WQLinear_GEMV.from_linear packs it; the GEMM packing of the same codes beside it, so the
// conversions in both directions must give the reference packer's words exactly.
TEST_P(AwqGemvVectors, ReadsAutoAwqGemvAndConvertsToAndFromGemmWordForWord) {
  Vectors vec(std::string(GetParam()) + ".safetensors");
  ASSERT_TRUE(vec.ok());
  const std::int64_t group = vec.params()["group_size"];
  auto t = read_awq_gemv(AwqGemvViews{vec.view("qweight"), vec.view("qzeros"), vec.view("scales")}, group);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->codes, vec.values<std::uint8_t>("logical.codes"));
  EXPECT_EQ(t->zeros, vec.values<std::int32_t>("logical.zeros"));
  EXPECT_EQ(t->zeros[0], 0);
  EXPECT_EQ(dequantize_f16(*t), u16_of(vec.view("ref.dequant")));
  auto gemv = write_awq_gemv(*t);
  ASSERT_TRUE(gemv) << gemv.error().to_string();
  auto gemm = write_awq(*t);
  ASSERT_TRUE(gemm) << gemm.error().to_string();
  for (const char* name : {"qweight", "qzeros", "scales"}) {
    EXPECT_EQ(find_tensor(*gemv, name)->bytes, bytes_of(vec.view(name))) << name;
    EXPECT_EQ(find_tensor(*gemm, name)->bytes, bytes_of(vec.view(std::string("gemm.") + name))) << name;
  }
  auto from_gemm =
      read_awq(AwqViews{vec.view("gemm.qweight"), vec.view("gemm.qzeros"), vec.view("gemm.scales")}, group);
  ASSERT_TRUE(from_gemm) << from_gemm.error().to_string();
  auto gemv2 = write_awq_gemv(*from_gemm);
  ASSERT_TRUE(gemv2);
  for (const char* name : {"qweight", "qzeros", "scales"}) {
    EXPECT_EQ(find_tensor(*gemv2, name)->bytes, bytes_of(vec.view(name))) << "GEMM -> GEMV " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, AwqGemvVectors,
                         ::testing::Values("awq_gemv_4bit_g128", "awq_gemv_4bit_g64", "awq_gemv_4bit_g32"));

class MarlinVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(MarlinVectors, WriterMatchesVllmRepackAndReaderInvertsIt) {
  Vectors vec(std::string(GetParam()) + ".safetensors");
  ASSERT_TRUE(vec.ok());
  const int bits = vec.params()["bits"];
  const std::int64_t group = vec.params()["group_size"];
  const std::int64_t k = vec.params()["k"];
  auto codes = vec.values<std::uint8_t>("logical.codes");
  const std::int64_t n = static_cast<std::int64_t>(codes.size()) / k;
  QuantTensor t = make_quant_tensor(bits, k, n, group);
  t.codes = codes;
  const TensorView scales = vec.view("logical.scales");
  for (std::size_t i = 0; i < t.scales.size(); ++i) t.scales[i] = view_float(scales, i);
  t.zeros.assign(t.zeros.size(), 1 << (bits - 1));
  t.g_idx = vec.values<std::int32_t>("logical.g_idx");
  ASSERT_TRUE(validate(t));
  auto written = write_marlin(t);
  ASSERT_TRUE(written) << written.error().to_string();
  std::vector<const char*> names = {"qweight", "scales"};
  if (vec.has("perm")) {
    names.push_back("g_idx");
    names.push_back("perm");
  }
  EXPECT_EQ(written->size(), names.size());
  for (const char* name : names) {
    ASSERT_NE(find_tensor(*written, name), nullptr) << name;
    EXPECT_EQ(find_tensor(*written, name)->bytes, bytes_of(vec.view(name))) << name;
  }
  MarlinViews mv{vec.view("qweight"), vec.view("scales"), std::nullopt, std::nullopt};
  if (vec.has("perm")) {
    mv.g_idx = vec.view("g_idx");
    mv.perm = vec.view("perm");
  }
  auto back = read_marlin(mv, bits, k, group);
  ASSERT_TRUE(back) << back.error().to_string();
  if (vec.has("perm")) {
    auto sorted = sort_groups(t);
    ASSERT_TRUE(sorted);
    testing::expect_same_logical(*back, *sorted);
  } else {
    testing::expect_same_logical(*back, t);
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, MarlinVectors,
                         ::testing::Values("marlin_4bit_g64", "marlin_4bit_g32_actorder", "marlin_4bit_channel",
                                           "marlin_8bit_g64"));

class CtVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(CtVectors, DequantizesLikeCompressedTensorsAndRepacksItsBytes) {
  Vectors vec(std::string(GetParam()) + ".safetensors");
  ASSERT_TRUE(vec.ok());
  const int bits = vec.params()["bits"];
  const std::int64_t group = vec.params()["group_size"];
  CtViews v{vec.view("weight_packed"), vec.view("weight_shape"), vec.view("weight_scale"), std::nullopt,
            std::nullopt};
  if (vec.has("weight_zero_point")) v.weight_zero_point = vec.view("weight_zero_point");
  auto t = read_compressed_tensors(v, bits, group, CtPacking::kDense);
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->codes, vec.values<std::uint8_t>("logical.codes"));
  // The reference output is [N, K] (nn.Linear order) in the scale dtype.
  const TensorView ref = vec.view("ref.dequant");
  const auto ours = t->scale_dtype == DType::kBF16 ? dequantize_bf16(*t) : dequantize_f16(*t);
  const std::int64_t k = t->rows, n = t->cols;
  const auto ref16 = u16_of(ref);
  ASSERT_EQ(ref16.size(), static_cast<std::size_t>(k * n));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < k; ++c) ASSERT_EQ(ours[c * n + r], ref16[r * k + c]) << r << "," << c;
  }
  auto written = write_compressed_tensors(*t, CtPacking::kDense);
  ASSERT_TRUE(written);
  for (const char* name : {"weight_packed", "weight_scale", "weight_zero_point"}) {
    if (!vec.has(name)) {
      EXPECT_EQ(find_tensor(*written, name), nullptr) << name;
      continue;
    }
    EXPECT_EQ(find_tensor(*written, name)->bytes, bytes_of(vec.view(name))) << name;
  }
  EXPECT_EQ(find_tensor(*written, "weight_shape")->bytes, bytes_of(vec.view("weight_shape")));
}

INSTANTIATE_TEST_SUITE_P(Reference, CtVectors,
                         ::testing::Values("ct_4bit_sym_g32_bf16", "ct_4bit_asym_g64_f16", "ct_3bit_asym_g32_bf16",
                                           "ct_8bit_asym_channel_bf16"));

TEST(GgufVectors, FileWrittenByGgufPyDequantizesBitIdentically) {
  auto f = gguf::File::open(testing::vector_path("gguf_small.gguf"));
  ASSERT_TRUE(f) << f.error().to_string();
  Vectors ref("gguf_small_ref.safetensors");
  ASSERT_TRUE(ref.ok());
  ASSERT_NE(f->find("epk.test.count"), nullptr);
  EXPECT_EQ(f->find("epk.test.count")->u, 7u);
  ASSERT_NE(f->find("general.architecture"), nullptr);
  EXPECT_EQ(f->find("general.architecture")->str, "llama");
  EXPECT_EQ(f->find("epk.test.floats")->count, 3u);
  EXPECT_EQ(f->find("epk.test.floats")->raw.size(), 3u * 4);  // f32 elements stay in the file
  int checked = 0;
  for (const char* name : {"q4_0", "q4_1", "q8_0", "f16", "q4_k", "q5_k", "q6_k"}) {
    const gguf::TensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    auto y = gguf::dequantize(t->type, f->tensor_bytes(*t), t->n_elements);
    ASSERT_TRUE(y) << name << ": " << y.error().to_string();
    const auto want = ref.values<float>(std::string("ref.") + name);
    ASSERT_EQ(y->size(), want.size()) << name;
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>((*y)[i]), std::bit_cast<std::uint32_t>(want[i])) << name << " " << i;
    }
    EXPECT_EQ(t->torch_shape(), ref.view(std::string("ref.") + name).shape) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

class BnbVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(BnbVectors, DequantizesLikeBitsandbytes) {
  Vectors vec(std::string(GetParam()) + ".safetensors");
  ASSERT_TRUE(vec.ok());
  const std::string qt = vec.params()["quant_type"];
  bnb::Views v{vec.view("weight"), vec.view("weight.absmax"), vec.view("weight.quant_map"), std::nullopt,
               std::nullopt, vec.view("weight.quant_state.bitsandbytes__" + qt)};
  if (vec.has("weight.nested_absmax")) {
    v.nested_absmax = vec.view("weight.nested_absmax");
    v.nested_quant_map = vec.view("weight.nested_quant_map");
  }
  auto s = bnb::read_state(v);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->double_quant, vec.params()["double_quant"] == 1);
  // The serialized code table is bitsandbytes' own; our built-in table must match it.
  const auto& builtin = qt == "nf4" ? bnb::kNf4Levels : bnb::kFp4Levels;
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(std::bit_cast<std::uint32_t>(s->code[i]), std::bit_cast<std::uint32_t>(builtin[i])) << i;
  auto f32 = bnb::dequantize_f32(v.weight, *s);
  ASSERT_TRUE(f32);
  const auto want32 = vec.values<float>("ref.dequant_f32");
  ASSERT_EQ(f32->size(), want32.size());
  for (std::size_t i = 0; i < want32.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>((*f32)[i]), std::bit_cast<std::uint32_t>(want32[i])) << i;
  }
  if (s->dtype != DType::kF32) {
    auto y = bnb::dequantize_16(v.weight, *s);
    ASSERT_TRUE(y);
    EXPECT_EQ(*y, u16_of(vec.view("ref.dequant")));
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, BnbVectors,
                         ::testing::Values("bnb_nf4_dq_bf16", "bnb_nf4_f16", "bnb_fp4_dq_f32", "bnb_fp4_bf16",
                                           "bnb_fp4_odd_bf16"));

}  // namespace
}  // namespace epk::layouts
